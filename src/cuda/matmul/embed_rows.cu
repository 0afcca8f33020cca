// Embedding rows as f32 for every weight type: block types one thread per 32-element sub-block
// (decoded with blocks.cuh, bit for bit the CPU's dequantizer), float types one thread per
// element.
#include "cuda/matmul/blocks.cuh"
#include "cuda/matmul/matmul.h"

namespace petrel::cuda {
namespace {

constexpr int kThreads = 256;

template <class Weight>
__global__ void __launch_bounds__(kThreads)
    EmbedBlockRowsKernel(const uint8_t* __restrict__ table, size_t row_bytes,
                         int64_t n_sub,  // sub-blocks per row
                         const int32_t* __restrict__ tokens, int64_t n_tokens,
                         float* __restrict__ out) {  // (n_tokens, n_sub * 32)
  const int64_t index = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (index >= n_tokens * n_sub) return;
  const int64_t t = index / n_sub, i = index % n_sub;
  const auto* blocks =
      reinterpret_cast<const typename Weight::Block*>(table + int64_t(tokens[t]) * row_bytes);
  float values[kSubBlockElems];
  Weight::Decode(blocks[i / Weight::kSubBlocks], int(i % Weight::kSubBlocks), values);
  float* row_out = out + index * kSubBlockElems;
#pragma unroll
  for (int j = 0; j < kSubBlockElems; ++j) row_out[j] = values[j];
}

template <class Weight>
__global__ void __launch_bounds__(kThreads)
    EmbedFloatRowsKernel(const uint8_t* __restrict__ table, size_t row_bytes, int64_t n_cols,
                         const int32_t* __restrict__ tokens, int64_t n_tokens,
                         float* __restrict__ out) {  // (n_tokens, n_cols)
  const int64_t index = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (index >= n_tokens * n_cols) return;
  const int64_t t = index / n_cols, j = index % n_cols;
  out[index] = Weight::Load(table + int64_t(tokens[t]) * row_bytes, j);
}

}  // namespace

cudaError_t LaunchEmbedRows(cudaStream_t stream, DType type, const void* table, size_t row_bytes,
                            int64_t n_cols, const int32_t* tokens, int64_t n_tokens, float* out) {
  if (n_tokens < 0 || n_cols < 0) return cudaErrorInvalidValue;
  if (n_tokens == 0 || n_cols == 0) return cudaSuccess;
  const auto* bytes = static_cast<const uint8_t*>(table);
  bool whole_blocks = true;
  const bool is_block_type = VisitBlockType(type, [&](auto weight) {
    using Weight = decltype(weight);
    if (n_cols % (Weight::kSubBlocks * kSubBlockElems) != 0) {
      whole_blocks = false;
      return;
    }
    const int64_t n_sub = n_cols / kSubBlockElems;
    EmbedBlockRowsKernel<Weight><<<BlocksFor(n_tokens * n_sub, kThreads), kThreads, 0, stream>>>(
        bytes, row_bytes, n_sub, tokens, n_tokens, out);
  });
  if (is_block_type) return whole_blocks ? cudaGetLastError() : cudaErrorInvalidValue;
  const bool known = VisitFloatType(type, [&](auto weight) {
    using Weight = decltype(weight);
    EmbedFloatRowsKernel<Weight><<<BlocksFor(n_tokens * n_cols, kThreads), kThreads, 0, stream>>>(
        bytes, row_bytes, n_cols, tokens, n_tokens, out);
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace petrel::cuda
