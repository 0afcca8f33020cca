// Matrix-vector products for F32, F16 and BF16 weights: one warp per weight row, f32 products and
// sums, a butterfly warp reduction. Rows whose elements can be read 16 bytes at a time (the
// common case) are: lane l reads elements 8l..8l+7, then 256 further on; others one element per
// lane per step. The choice depends only on the weight (address, row bytes, n_cols), so a
// weight always sums in the same order: batch-invariant for the same reason as matvec_blocks.cu.
#include <cstdint>

#include "cuda/matmul/launch.h"
#include "cuda/matmul/warp.cuh"

namespace petrel::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreadsPerBlock = kWarpsPerBlock * kWarpSize;

template <class Weight, bool kEightAtATime>
__global__ void __launch_bounds__(kThreadsPerBlock)
    FloatMatVecKernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_rows,
                      int64_t n_cols, const float* __restrict__ x,  // (n_tokens, n_cols)
                      int n_tokens, const float* __restrict__ bias,
                      float* __restrict__ y) {  // (n_tokens, n_rows)
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= n_rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const void* weights = w + row * row_bytes;
  float acc[kMatVecTokens] = {};
  if constexpr (kEightAtATime) {
    for (int64_t j = 8 * lane; j < n_cols; j += 8 * kWarpSize) {
      float weight[8];
      Weight::Load8(weights, j, weight);
#pragma unroll
      for (int t = 0; t < kMatVecTokens; ++t) {
        if (t >= n_tokens) break;
        const float* xs = x + t * n_cols + j;
        float sum = acc[t];
#pragma unroll
        for (int i = 0; i < 8; ++i) sum = __fmaf_rn(weight[i], xs[i], sum);
        acc[t] = sum;
      }
    }
  } else {
    for (int64_t j = lane; j < n_cols; j += kWarpSize) {
      const float weight = Weight::Load(weights, j);
#pragma unroll
      for (int t = 0; t < kMatVecTokens; ++t) {
        if (t < n_tokens) acc[t] = __fmaf_rn(weight, x[t * n_cols + j], acc[t]);
      }
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
  // Eight elements (16 or 32 bytes) per load where every row start and element 8k is 16-byte
  // aligned.
  const bool eight_at_a_time =
      reinterpret_cast<uintptr_t>(w) % 16 == 0 && row_bytes % 16 == 0 && n_cols % 8 == 0;
  const bool known = VisitFloatType(type, [&](auto weight) {
    using Weight = decltype(weight);
    const dim3 grid(BlocksFor(n_rows, kWarpsPerBlock));
    const auto* bytes = static_cast<const uint8_t*>(w);
    if (eight_at_a_time) {
      FloatMatVecKernel<Weight, true><<<grid, kThreadsPerBlock, 0, stream>>>(
          bytes, row_bytes, n_rows, n_cols, x, int(n_tokens), bias, y);
    } else {
      FloatMatVecKernel<Weight, false><<<grid, kThreadsPerBlock, 0, stream>>>(
          bytes, row_bytes, n_rows, n_cols, x, int(n_tokens), bias, y);
    }
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace petrel::cuda
