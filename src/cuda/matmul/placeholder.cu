// Stand-in replaced by the real weight kernels when they land: reports "no kernels" for every type.
#include "cuda/matmul/matmul.h"

namespace petrel::cuda {

bool HasWeightKernels(DType) { return false; }

size_t MatMulScratchBytes(DType, int64_t, int64_t, int64_t) { return 0; }

cudaError_t LaunchMatMul(cudaStream_t, cublasHandle_t, DType, const void*, size_t, int64_t, int64_t,
                         const float*, int64_t, const float*, float*, void*, size_t) {
  return cudaErrorNotSupported;
}

cudaError_t LaunchEmbedRows(cudaStream_t, DType, const void*, size_t, int64_t, const int32_t*,
                            int64_t, float*) {
  return cudaErrorNotSupported;
}

}  // namespace petrel::cuda
