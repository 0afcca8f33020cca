// Matrix-vector products for the block types: one warp per weight row, each lane a strided run
// of 32-element sub-blocks (neighbouring lanes read neighbouring bytes of the row as stored),
// dot products in int8 with dp4a against the activations quantized by
// quantize_activations.cu, a butterfly warp reduction, the bias added by lane 0.
//
// Batch invariance: a token's result depends only on its own activations. Every token of a
// launch runs the same instruction sequence (its slot of the unrolled token loop), over the same
// sub-blocks per lane and the same reduction tree, whatever the other tokens and their number.
#include "cuda/matmul/launch.h"
#include "cuda/matmul/warp.cuh"

namespace petrel::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreadsPerBlock = kWarpsPerBlock * kWarpSize;

template <class Weight>
__global__ void __launch_bounds__(kThreadsPerBlock)
    BlockMatVecKernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_rows,
                      int64_t n_sub,                            // sub-blocks per row
                      const ActivationBlock* __restrict__ act,  // (n_tokens, n_sub)
                      int n_tokens, const float* __restrict__ bias,
                      float* __restrict__ y) {  // (n_tokens, n_rows)
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= n_rows) return;  // whole warps leave together
  const int lane = threadIdx.x % kWarpSize;
  const auto* blocks = reinterpret_cast<const typename Weight::Block*>(w + row * row_bytes);
  float acc[kMatVecTokens] = {};
  for (int64_t i = lane; i < n_sub; i += kWarpSize) {
    const typename Weight::Block& block = blocks[i / Weight::kSubBlocks];
    const int sub = int(i % Weight::kSubBlocks);
#pragma unroll
    for (int t = 0; t < kMatVecTokens; ++t) {
      if (t < n_tokens) acc[t] = __fadd_rn(acc[t], Weight::Dot(block, sub, act[t * n_sub + i]));
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

cudaError_t LaunchBlockMatVec(cudaStream_t stream, DType type, const void* w, size_t row_bytes,
                              int64_t n_rows, int64_t n_cols, const ActivationBlock* act,
                              int64_t n_tokens, const float* bias, float* y) {
  if (n_tokens > kMatVecTokens) return cudaErrorInvalidValue;
  if (n_rows == 0 || n_tokens == 0) return cudaSuccess;
  const bool known = VisitBlockType(type, [&](auto weight) {
    using Weight = decltype(weight);
    BlockMatVecKernel<Weight><<<BlocksFor(n_rows, kWarpsPerBlock), kThreadsPerBlock, 0, stream>>>(
        static_cast<const uint8_t*>(w), row_bytes, n_rows, n_cols / kSubBlockElems, act,
        int(n_tokens), bias, y);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace petrel::cuda
