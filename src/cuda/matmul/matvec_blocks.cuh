// Matrix-vector products for the block types: one warp per weight row, each lane a strided run
// of 32-element sub-blocks (neighbouring lanes read neighbouring bytes of the row as stored),
// dot products in int8 with dp4a against the activations quantized by
// quantize_activations.cu, a butterfly warp reduction, the bias added by lane 0. Instantiated by
// matvec_blocks.cu and matvec_blocks_lowbit.cu, each for half of the block types.
//
// Batch invariance: a token's result depends only on its own activations. Every token of a
// launch runs the same instruction sequence (its slot of the unrolled token loop), over the same
// sub-blocks per lane and the same reduction tree, whatever the other tokens and their number.
#pragma once

#include "cuda/matmul/launch.h"
#include "cuda/matmul/warp.cuh"

namespace petrel::cuda {
// Internal linkage: each including file launches its own instantiations, from its own module.
namespace {

constexpr int kMatVecWarpsPerBlock = 4;
constexpr int kMatVecThreadsPerBlock = kMatVecWarpsPerBlock * kWarpSize;

template <class Weight>
__global__ void __launch_bounds__(kMatVecThreadsPerBlock)
    BlockMatVecKernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_rows,
                      int64_t n_sub,                            // sub-blocks per row
                      const ActivationBlock* __restrict__ act,  // (n_tokens, n_sub)
                      int n_tokens, const float* __restrict__ bias,
                      float* __restrict__ y) {  // (n_tokens, n_rows)
  const int64_t row = int64_t(blockIdx.x) * kMatVecWarpsPerBlock + threadIdx.x / kWarpSize;
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

// Launches the kernel for `type` when it is one of `Weights` and returns true; false, launching
// nothing, for any other type. Arguments as LaunchBlockMatVec's, already checked.
template <class Weights>
bool LaunchBlockMatVecOf(cudaStream_t stream, DType type, const void* w, size_t row_bytes,
                         int64_t n_rows, int64_t n_cols, const ActivationBlock* act,
                         int64_t n_tokens, const float* bias, float* y) {
  return Weights::Visit(type, [&](auto weight) {
    using Weight = decltype(weight);
    BlockMatVecKernel<Weight>
        <<<BlocksFor(n_rows, kMatVecWarpsPerBlock), kMatVecThreadsPerBlock, 0, stream>>>(
            static_cast<const uint8_t*>(w), row_bytes, n_rows, n_cols / kSubBlockElems, act,
            int(n_tokens), bias, y);
  });
}

}  // namespace
}  // namespace petrel::cuda
