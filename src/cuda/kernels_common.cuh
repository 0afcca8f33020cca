// What every CUDA kernel file shares: the host/device qualifier that lets block decoders be
// compiled by the host compiler too (so their arithmetic is tested on machines without a GPU),
// and small launch helpers.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PETREL_HD __host__ __device__ __forceinline__
#else
#define PETREL_HD inline
#endif

namespace petrel::cuda {

// Blocks of `per_block` threads needed to cover `n` items.
PETREL_HD unsigned BlocksFor(int64_t n, unsigned per_block) {
  return unsigned((n + per_block - 1) / per_block);
}

}  // namespace petrel::cuda
