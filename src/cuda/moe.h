// Launchers of moe_ffn's own kernels (moe.cu): the experts' gated activation and each token's
// weighted sum of its expert rows. Pointers are device memory, values row-major f32; launches
// are asynchronous on `stream` and return the launch's error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace petrel::cuda {

// gpt-oss's clamped SwiGLU over n values, in place in `up` (host_moe.h's ClampedSwiGlu):
// g' = min(g, limit), u' = clamp(u, -limit, limit) (no clamp when limit is 0),
// up = g' * sigmoid(alpha * g') * (u' + up_offset).
cudaError_t LaunchClampedSwiGlu(cudaStream_t stream, const float* gate, float* up, int64_t n,
                                float alpha, float limit, float up_offset);

// out[t] = sum over r < top_k of weights[t * top_k + r] * y[pair_rows[t * top_k + r]], in r
// order (as the host backends sum), for n_tokens rows of n_out values.
cudaError_t LaunchMoeCombine(cudaStream_t stream, const float* y, const int32_t* pair_rows,
                             const float* weights, float* out, int64_t n_tokens, int64_t n_out,
                             int32_t top_k);

}  // namespace petrel::cuda
