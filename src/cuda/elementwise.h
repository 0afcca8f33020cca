// Launchers of the CUDA backend's own kernels (elementwise.cu): element-wise ops, row norms,
// RoPE and row selection. Pointers are device memory, values row-major f32; launches are
// asynchronous on `stream` and return the launch's error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace petrel::cuda {

enum class BinaryOp : uint8_t { kAdd, kSiluMul, kGeluMul };
enum class UnaryOp : uint8_t { kScale, kSoftcap };

// out[i] = op(a[i], b[i]) for n values.
cudaError_t LaunchBinary(cudaStream_t stream, BinaryOp op, const float* a, const float* b,
                         float* out, int64_t n);
// out[i] = op(x[i], scalar) (the factor or the cap).
cudaError_t LaunchUnary(cudaStream_t stream, UnaryOp op, const float* x, float scalar, float* out,
                        int64_t n);
// Each of n_rows rows of n_cols values RMS-normed and scaled by the n_cols weight (head_rms_norm
// runs each head as a row).
cudaError_t LaunchRmsNorm(cudaStream_t stream, const float* x, const float* weight, float* out,
                          int64_t n_rows, int32_t n_cols, float eps);
// Rotates, in place, the first 2 * pairs dimensions of every head of q (n_heads) and k
// (n_kv_heads) of each token by positions[t] * inv_freq[i] (angles in double).
cudaError_t LaunchRope(cudaStream_t stream, float* q, float* k, const int32_t* positions,
                       const double* inv_freq, int32_t n_tokens, int32_t n_heads,
                       int32_t n_kv_heads, int32_t head_dim, int32_t pairs, bool half_split);
// out[i] = in[rows[i]] for n_rows rows of n_cols values.
cudaError_t LaunchGetRows(cudaStream_t stream, const float* in, const int32_t* rows, float* out,
                          int64_t n_rows, int64_t n_cols);

}  // namespace petrel::cuda
