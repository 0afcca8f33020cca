// Attention over the paged KV cache on the device: writing a batch's K/V rows into their slots,
// then causal attention of each query over its sequence's blocks.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/graph/graph.h"  // AttentionParams
#include "quant/types.h"

namespace petrel::cuda {

// One attention node of one batch. Pointers are device memory; the int32 arrays are the
// batch's BatchContext arrays (core/runtime/backend.h), uploaded once per batch.
struct AttentionArgs {
  AttentionParams params;  // heads, head_dim, scale, logit soft-cap, window
  int32_t n_tokens = 0;
  int32_t max_ctx = 0;     // the largest n_ctx of the batch
  // KV storage of the layer: (n_blocks, block_tokens, row_elems) elements of kv_type each for K
  // and V, row_elems = n_kv_heads * head_dim; Q8_0 rows are RowBytes(kQ8_0, row_elems) bytes.
  DType kv_type = DType::kF32;  // kF32, kF16 or kQ8_0
  int32_t block_tokens = 0;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const float* q = nullptr;  // (n_tokens, n_heads * head_dim), already rotated
  const float* k = nullptr;  // (n_tokens, row_elems), already rotated
  const float* v = nullptr;  // (n_tokens, row_elems)
  float* out = nullptr;      // (n_tokens, n_heads * head_dim)
  const int32_t* kv_slot = nullptr;            // (n_tokens) flat slot block * block_tokens + offset
  const int32_t* n_ctx = nullptr;              // (n_tokens) positions token t attends (its own + 1)
  const int32_t* token_seq = nullptr;          // (n_tokens) sequence index of each token
  const int32_t* block_tables = nullptr;       // blocks of sequence s, in position order, at
  const int32_t* block_table_begin = nullptr;  // [block_table_begin[s], block_table_begin[s+1])
  void* scratch = nullptr;                     // AttentionScratchBytes(*this) bytes
  size_t scratch_bytes = 0;
};

// Whether these parameters and KV type have kernels (head_dim and group limits).
bool SupportsAttention(const AttentionParams& params, DType kv_type);
// Device scratch LaunchAttention needs (partial results of the split-K decode kernel).
size_t AttentionScratchBytes(const AttentionArgs& args);

// Writes k and v of every token to its kv_slot, converted to kv_type.
cudaError_t LaunchKvWrite(cudaStream_t stream, const AttentionArgs& args);
// out = softmax(scale * q K^T, soft-capped, causal and windowed) V for every token and head, after
// LaunchKvWrite on the same stream.
cudaError_t LaunchAttention(cudaStream_t stream, const AttentionArgs& args);

}  // namespace petrel::cuda
