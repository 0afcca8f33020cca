// Activations to 8-bit blocks for the dp4a matrix-vector kernels: one warp per 32 values, each
// lane one value; the same arithmetic as QuantizeActivationBlock (blocks.cuh), so the host tests
// of that function hold for this kernel.
#include "cuda/matmul/launch.h"
#include "cuda/matmul/warp.cuh"

namespace petrel::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

__global__ void QuantizeActivationsKernel(const float* x, int64_t n_act_blocks,
                                          ActivationBlock* act) {
  const int64_t index = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (index >= n_act_blocks) return;  // whole warps leave together
  const int lane = threadIdx.x % kWarpSize;
  // Blocks of consecutive tokens are consecutive in x too: n_cols is a multiple of 32.
  const float value = x[index * kSubBlockElems + lane];
  const float d = WarpMax(fabsf(value)) / 127.f;
  const float inv_d = d != 0.f ? 1.f / d : 0.f;
  const int q = int(rintf(value * inv_d));
  const int sum = WarpSum(q);
  act[index].qs[lane] = int8_t(q);
  if (lane == 0) {
    act[index].d = d;
    act[index].s = d * float(sum);
  }
}

}  // namespace

cudaError_t LaunchQuantizeActivations(cudaStream_t stream, const float* x, int64_t n_tokens,
                                      int64_t n_cols, ActivationBlock* act) {
  const int64_t n_act_blocks = n_tokens * (n_cols / kSubBlockElems);
  if (n_act_blocks == 0) return cudaSuccess;
  QuantizeActivationsKernel<<<BlocksFor(n_act_blocks, kWarpsPerBlock), kWarpsPerBlock * kWarpSize,
                              0, stream>>>(x, n_act_blocks, act);
  return cudaGetLastError();
}

}  // namespace petrel::cuda
