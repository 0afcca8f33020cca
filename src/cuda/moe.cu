// moe_ffn's own kernels (moe.h); the expert products are LaunchMatMul's.
#include "cuda/moe.h"

namespace petrel::cuda {
namespace {

constexpr unsigned kBlock = 256;
constexpr unsigned kMaxBlocks = 65535;  // past this, grid-stride loops

unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  return blocks < 1 ? 1u : blocks > kMaxBlocks ? kMaxBlocks : unsigned(blocks);
}

__global__ void ClampedSwiGluKernel(const float* __restrict__ gate, float* __restrict__ up,
                                    int64_t n, float alpha, float limit, float up_offset) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float g = gate[i], u = up[i];
    if (limit > 0.0f) {
      g = fminf(g, limit);
      u = fminf(fmaxf(u, -limit), limit);
    }
    up[i] = g / (1.0f + expf(-alpha * g)) * (u + up_offset);
  }
}

__global__ void MoeCombineKernel(const float* __restrict__ y, const int32_t* __restrict__ pair_rows,
                                 const float* __restrict__ weights, float* __restrict__ out,
                                 int64_t n_tokens, int64_t n_out, int32_t top_k) {
  const int64_t n = n_tokens * n_out;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / n_out, col = i % n_out;
    float sum = 0.0f;
    for (int32_t r = 0; r < top_k; ++r) {
      const int64_t pair = t * top_k + r;
      const float v = weights[pair] * y[int64_t(pair_rows[pair]) * n_out + col];
      sum = r == 0 ? v : sum + v;
    }
    out[i] = sum;
  }
}

}  // namespace

cudaError_t LaunchClampedSwiGlu(cudaStream_t stream, const float* gate, float* up, int64_t n,
                                float alpha, float limit, float up_offset) {
  if (n <= 0) return cudaSuccess;
  ClampedSwiGluKernel<<<GridFor(n), kBlock, 0, stream>>>(gate, up, n, alpha, limit, up_offset);
  return cudaGetLastError();
}

cudaError_t LaunchMoeCombine(cudaStream_t stream, const float* y, const int32_t* pair_rows,
                             const float* weights, float* out, int64_t n_tokens, int64_t n_out,
                             int32_t top_k) {
  const int64_t n = n_tokens * n_out;
  if (n <= 0) return cudaSuccess;
  MoeCombineKernel<<<GridFor(n), kBlock, 0, stream>>>(y, pair_rows, weights, out, n_tokens, n_out,
                                                      top_k);
  return cudaGetLastError();
}

}  // namespace petrel::cuda
