// Rows of a block-type matrix decoded to F16 for the cuBLAS path (a tile of rows at a time):
// one thread per 32-element sub-block, decoded with blocks.cuh and rounded to nearest even.
#include <cuda_fp16.h>

#include "cuda/matmul/launch.h"

namespace petrel::cuda {
namespace {

constexpr int kThreads = 256;

template <class Weight>
__global__ void __launch_bounds__(kThreads)
    DequantizeToF16Kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_rows,
                          int64_t n_sub,                // sub-blocks per row
                          __half2* __restrict__ out) {  // (n_rows, n_sub * 16) pairs
  const int64_t index = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (index >= n_rows * n_sub) return;
  const int64_t row = index / n_sub, i = index % n_sub;
  const auto* blocks = reinterpret_cast<const typename Weight::Block*>(w + row * row_bytes);
  float values[kSubBlockElems];
  Weight::Decode(blocks[i / Weight::kSubBlocks], int(i % Weight::kSubBlocks), values);
  __half2* pairs = out + index * (kSubBlockElems / 2);
#pragma unroll
  for (int j = 0; j < kSubBlockElems / 2; ++j) {
    pairs[j] = __floats2half2_rn(values[2 * j], values[2 * j + 1]);
  }
}

}  // namespace

cudaError_t LaunchDequantizeToF16(cudaStream_t stream, DType type, const void* w, size_t row_bytes,
                                  int64_t n_rows, int64_t n_cols, void* out) {
  const int64_t n_sub = n_cols / kSubBlockElems;
  if (n_rows * n_sub == 0) return cudaSuccess;
  const bool known = VisitBlockType(type, [&](auto weight) {
    using Weight = decltype(weight);
    DequantizeToF16Kernel<Weight><<<BlocksFor(n_rows * n_sub, kThreads), kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(w), row_bytes, n_rows, n_sub, static_cast<__half2*>(out));
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace petrel::cuda
