// Matrix-vector products for F32, F16 and BF16 weights: one warp per weight row, lane j reading
// elements j, j + 32, ... (coalesced), f32 products and sums, a butterfly warp reduction.
// Batch-invariant for the same reason as matvec_blocks.cu.
#include "cuda/matmul/launch.h"
#include "cuda/matmul/warp.cuh"

namespace petrel::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

template <class Weight>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    FloatMatVecKernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_rows,
                      int64_t n_cols, const float* __restrict__ x,  // (n_tokens, n_cols)
                      int n_tokens, const float* __restrict__ bias,
                      float* __restrict__ y) {  // (n_tokens, n_rows)
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= n_rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const void* weights = w + row * row_bytes;
  float acc[kMatVecTokens] = {};
  for (int64_t j = lane; j < n_cols; j += kWarpSize) {
    const float weight = Weight::Load(weights, j);
#pragma unroll
    for (int t = 0; t < kMatVecTokens; ++t) {
      if (t < n_tokens) acc[t] = __fmaf_rn(weight, x[t * n_cols + j], acc[t]);
    }
  }
#pragma unroll
  for (int t = 0; t < kMatVecTokens; ++t) {
    if (t >= n_tokens) break;
    const float sum = WarpSum(acc[t]);
    if (lane == 0) y[t * n_rows + row] = bias ? __fadd_rn(sum, bias[row]) : sum;
  }
}

}  // namespace

cudaError_t LaunchFloatMatVec(cudaStream_t stream, DType type, const void* w, size_t row_bytes,
                              int64_t n_rows, int64_t n_cols, const float* x, int64_t n_tokens,
                              const float* bias, float* y) {
  if (n_tokens > kMatVecTokens) return cudaErrorInvalidValue;
  if (n_rows == 0 || n_tokens == 0) return cudaSuccess;
  const bool known = VisitFloatType(type, [&](auto weight) {
    using Weight = decltype(weight);
    FloatMatVecKernel<Weight><<<BlocksFor(n_rows, kWarpsPerBlock), kWarpsPerBlock * kWarpSize, 0,
                                stream>>>(static_cast<const uint8_t*>(w), row_bytes, n_rows, n_cols,
                                          x, int(n_tokens), bias, y);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace petrel::cuda
