// Warp-wide reductions shared by the matrix kernels (device only).
#pragma once

#include <cuda_runtime.h>

namespace petrel::cuda {

constexpr int kWarpSize = 32;

// Butterfly reductions: every lane ends with the result, summed in the same order on every call.
__device__ __forceinline__ float WarpSum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = __fadd_rn(value, __shfl_xor_sync(0xFFFFFFFFu, value, offset));
  }
  return value;
}

__device__ __forceinline__ int WarpSum(int value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xFFFFFFFFu, value, offset);
  }
  return value;
}

__device__ __forceinline__ float WarpMax(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xFFFFFFFFu, value, offset));
  }
  return value;
}

}  // namespace petrel::cuda
