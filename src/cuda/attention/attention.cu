// Attention's entry points: what is supported, the scratch it needs, and the choice between the
// split-K decode kernel (few tokens) and the tiled prefill kernel (many).
#include <math.h>

#include <cstdint>

#include "cuda/attention/attention.h"
#include "cuda/attention/attention_kernels.h"
#include "cuda/attention/attention_math.cuh"

namespace petrel::cuda {
namespace {

// The KV cache types the kernels read: the cache's row per type on this device.
bool IsKvType(DType type) {
  return type == DType::kF32 || type == DType::kF16 || type == DType::kQ8_0;
}

bool UsesSplitK(const AttentionArgs& args) { return args.n_tokens <= attn::kDecodeMaxTokens; }

}  // namespace

attn::KvKind KvKindOf(DType kv_type) {
  if (kv_type == DType::kF16) return attn::KvKind::kF16;
  if (kv_type == DType::kQ8_0) return attn::KvKind::kQ8_0;
  return attn::KvKind::kF32;
}

bool SupportsAttention(const AttentionParams& params, DType kv_type) {
  // Grid dimensions: heads run along grid.y (at most 65535).
  return IsKvType(kv_type) && params.n_heads > 0 && params.n_heads <= 65535 &&
         params.n_kv_heads > 0 && params.n_heads % params.n_kv_heads == 0 && params.head_dim > 0 &&
         params.head_dim <= attn::kMaxHeadDim &&
         (kv_type != DType::kQ8_0 || params.head_dim % attn::kQ8BlockElems == 0) &&
         isfinite(params.scale) && params.logit_softcap >= 0.0f && params.window >= 0;
}

size_t AttentionScratchBytes(const AttentionArgs& args) {
  if (args.n_tokens <= 0 || !UsesSplitK(args) || args.max_ctx <= 0) return 0;
  return size_t(attn::DecodeScratchFloats(args.n_tokens, args.params.n_heads, args.max_ctx,
                                          args.params.head_dim)) *
         sizeof(float);
}

cudaError_t LaunchAttention(cudaStream_t stream, const AttentionArgs& args) {
  if (!SupportsAttention(args.params, args.kv_type) || args.n_tokens < 0 ||
      args.block_tokens <= 0) {
    return cudaErrorInvalidValue;
  }
  if (args.n_tokens == 0) return cudaSuccess;
  if (args.max_ctx <= 0 || args.q == nullptr || args.out == nullptr || args.k_cache == nullptr ||
      args.v_cache == nullptr || args.n_ctx == nullptr || args.token_seq == nullptr ||
      args.block_tables == nullptr || args.block_table_begin == nullptr) {
    return cudaErrorInvalidValue;
  }
  const attn::KvKind kind = KvKindOf(args.kv_type);
  if (!UsesSplitK(args)) return LaunchTiledPrefill(stream, args, kind);
  if (args.scratch == nullptr || args.scratch_bytes < AttentionScratchBytes(args))
    return cudaErrorInvalidValue;
  return LaunchSplitKDecode(stream, args, kind);
}

}  // namespace petrel::cuda
