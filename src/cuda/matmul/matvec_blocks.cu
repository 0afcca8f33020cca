// LaunchBlockMatVec (launch.h) and the matrix-vector kernels of the classic block types (the
// scalar formats, the K-quants, IQ4); matvec_blocks_lowbit.cu has the others.
#include "cuda/matmul/matvec_blocks.cuh"

namespace petrel::cuda {

cudaError_t LaunchBlockMatVec(cudaStream_t stream, DType type, const void* w, size_t row_bytes,
                              int64_t n_rows, int64_t n_cols, const ActivationBlock* act,
                              int64_t n_tokens, const float* bias, float* y) {
  if (n_tokens > kMatVecTokens) return cudaErrorInvalidValue;
  if (n_rows == 0 || n_tokens == 0) return cudaSuccess;
  const bool known =
      LaunchBlockMatVecOf<ClassicBlockWeights>(stream, type, w, row_bytes, n_rows, n_cols, act,
                                               n_tokens, bias, y) ||
      LaunchLowBitBlockMatVec(stream, type, w, row_bytes, n_rows, n_cols, act, n_tokens, bias, y);
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace petrel::cuda
