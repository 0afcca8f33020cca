// Matrix multiplication and embedding rows on the device, for every weight type petrel loads
// (F32, F16, BF16 and the GGUF block types), each run from the bytes as stored.
//
// All activations are row-major f32 in device memory. Weights are `n_rows` rows of `n_cols`
// elements, rows `row_bytes` apart (RowBytes(type, n_cols)). Launches are asynchronous on
// `stream`; errors come back as the launch's cudaError_t (cuBLAS statuses mapped to one), never
// an abort. Bad arguments (a type without kernels, a partial block, rows shorter than RowBytes,
// too little scratch) return cudaErrorInvalidValue before anything is launched. Pointers: weights
// 2-byte aligned (F32: 4), scratch 256-byte aligned (as cudaMalloc's). LaunchMatMul binds
// `cublas` to `stream` (cublasSetStream) and expects its default host pointer mode.
//
// Batch invariance. Batches of up to kMatVecMaxTokens tokens take the matrix-vector kernels, in
// which a token's output depends only on its own row of x (bit for bit, whatever the other rows
// and their number). Larger batches take cuBLAS on F16 (BF16, F32) operands, which rounds
// differently (x to F16 rather than to 8-bit blocks for the block types) and whose summation
// order cuBLAS chooses by shape: a token's output there may change in the last bits with the
// batch size. SetBatchInvariant(true) sends every batch through the matrix-vector kernels,
// kMatVecMaxTokens tokens per launch, so outputs are identical for any batching (at a cost in
// prompt speed).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace petrel::cuda {

// Batches of up to this many tokens take the matrix-vector kernels; larger ones cuBLAS.
inline constexpr int64_t kMatVecMaxTokens = 8;

// Batch-invariant mode, process-wide, off by default (see above). MatMulScratchBytes does not
// depend on it, so it may be switched between launches.
void SetBatchInvariant(bool on);
bool BatchInvariant();

// Whether LaunchMatMul and LaunchEmbedRows run weights of `type`.
bool HasWeightKernels(DType type);

// Device scratch LaunchMatMul needs for this shape (0 when none): x quantized to 8-bit blocks for
// the dot-product kernels, or a dequantized F16 tile of W for cuBLAS.
size_t MatMulScratchBytes(DType type, int64_t n_rows, int64_t n_cols, int64_t n_tokens);

// y (n_tokens, n_rows) = x (n_tokens, n_cols) times W transposed, plus bias (n_rows, f32) when
// not null. Few tokens: matrix-vector kernels with dp4a dot products on the blocks as stored;
// many: W dequantized to F16 in tiles and multiplied with cuBLAS (F32 accumulation).
cudaError_t LaunchMatMul(cudaStream_t stream, cublasHandle_t cublas, DType type, const void* w,
                         size_t row_bytes, int64_t n_rows, int64_t n_cols, const float* x,
                         int64_t n_tokens, const float* bias, float* y, void* scratch,
                         size_t scratch_bytes);

// out (n_tokens, n_cols) = rows tokens[t] of the table, as f32. `tokens` is in device memory
// and already checked against n_rows by the caller.
cudaError_t LaunchEmbedRows(cudaStream_t stream, DType type, const void* table, size_t row_bytes,
                            int64_t n_cols, const int32_t* tokens, int64_t n_tokens, float* out);

}  // namespace petrel::cuda
