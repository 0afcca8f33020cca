// The matrix-vector kernels of the low-bit block types (IQ1-IQ3, TQ1_0, TQ2_0, MXFP4, Q1_0,
// Q2_0): a file of their own so that nvcc compiles them beside matvec_blocks.cu's.
#include "cuda/matmul/matvec_blocks.cuh"

namespace petrel::cuda {

bool LaunchLowBitBlockMatVec(cudaStream_t stream, DType type, const void* w, size_t row_bytes,
                             int64_t n_rows, int64_t n_cols, const ActivationBlock* act,
                             int64_t n_tokens, const float* bias, float* y) {
  return LaunchBlockMatVecOf<LowBitBlockWeights>(stream, type, w, row_bytes, n_rows, n_cols, act,
                                                 n_tokens, bias, y);
}

}  // namespace petrel::cuda
