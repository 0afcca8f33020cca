// Element-wise helpers of the cuBLAS path: activations to F16 or BF16 (round to nearest even),
// and the bias added to every token's output row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/matmul/launch.h"

namespace petrel::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void ConvertToF16Kernel(const float* __restrict__ x, int64_t n_elems,
                                   __half* __restrict__ out) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n_elems) out[i] = __float2half_rn(x[i]);
}

__global__ void ConvertToBF16Kernel(const float* __restrict__ x, int64_t n_elems,
                                    __nv_bfloat16* __restrict__ out) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n_elems) out[i] = __float2bfloat16_rn(x[i]);
}

__global__ void AddBiasKernel(const float* __restrict__ bias, int64_t n_tokens, int64_t n_rows,
                              float* __restrict__ y) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n_tokens * n_rows) y[i] = __fadd_rn(y[i], bias[i % n_rows]);
}

}  // namespace

cudaError_t LaunchConvertToF16(cudaStream_t stream, const float* x, int64_t n_elems, void* out) {
  if (n_elems == 0) return cudaSuccess;
  ConvertToF16Kernel<<<BlocksFor(n_elems, kThreads), kThreads, 0, stream>>>(
      x, n_elems, static_cast<__half*>(out));
  return cudaGetLastError();
}

cudaError_t LaunchConvertToBF16(cudaStream_t stream, const float* x, int64_t n_elems, void* out) {
  if (n_elems == 0) return cudaSuccess;
  ConvertToBF16Kernel<<<BlocksFor(n_elems, kThreads), kThreads, 0, stream>>>(
      x, n_elems, static_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(cudaStream_t stream, const float* bias, int64_t n_tokens, int64_t n_rows,
                          float* y) {
  if (n_tokens * n_rows == 0) return cudaSuccess;
  AddBiasKernel<<<BlocksFor(n_tokens * n_rows, kThreads), kThreads, 0, stream>>>(bias, n_tokens,
                                                                                 n_rows, y);
  return cudaGetLastError();
}

}  // namespace petrel::cuda
