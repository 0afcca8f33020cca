// RoPE and attention over the paged KV cache.
#include "vulkan/ops.h"

#include <optional>
#include <string>
#include <utility>

namespace petrel::vk {
namespace {

constexpr uint32_t kRopeGroup = 128;
constexpr uint32_t kKvWriteGroup = 64;
// attention.comp: one workgroup per (token, head) of kAttentionGroup invocations (a power of two,
// the tile of positions scored at once; at most the shader's MAX_GROUP), with q and the
// accumulator of a head (at most kMaxHeadDim values, the shader's MAX_HEAD_DIM) in shared memory.
constexpr uint32_t kAttentionGroup = 128;
constexpr uint32_t kMaxHeadDim = 512;
constexpr uint32_t kAttentionMaxGroup = 256;
constexpr size_t kAttentionSharedBytes =
    (2 * kMaxHeadDim + 3 * kAttentionMaxGroup) * sizeof(float);

// The shader name suffix of a KV element type, or null when there is no shader for it.
const char* KvSuffix(DType type) {
  if (type == DType::kF32) return "f32";
  if (type == DType::kF16) return "f16";
  if (type == DType::kQ8_0) return "q8_0";
  return nullptr;
}

}  // namespace

bool SupportsAttention(const AttentionParams& params, const DeviceCaps& caps) {
  return params.n_heads > 0 && params.n_kv_heads > 0 && params.n_heads % params.n_kv_heads == 0 &&
         params.head_dim > 0 && uint32_t(params.head_dim) <= kMaxHeadDim &&
         params.logit_softcap >= 0.0f && params.window >= 0 &&
         kAttentionGroup <= caps.max_workgroup_size_x &&
         kAttentionSharedBytes <= caps.max_shared_memory;
}

bool SupportsKvType(DType type) { return KvSuffix(type) != nullptr; }

Status RecordRope(const OpContext& ctx, const Node& node, const ValueView* values) {
  const RopeParams& p = node.rope;
  if (p.inv_freq == nullptr || p.rot_dims < 0 || p.rot_dims % 2 != 0 || p.rot_dims > p.head_dim)
    return Error("vulkan: rope of layer %d has %d rotated dimensions of %d", node.layer,
                 p.rot_dims, p.head_dim);
  const ValueView& q = values[node.inputs[0]];
  const ValueView& k = values[node.inputs[1]];
  const uint32_t n_tokens = uint32_t(ctx.batch.n_tokens);
  const uint32_t pairs = uint32_t(p.rot_dims / 2);
  if (n_tokens == 0 || pairs == 0) return Status::Ok();
  if (q.desc.ne[1] != int64_t(n_tokens) || k.desc.ne[1] != int64_t(n_tokens) ||
      q.desc.ne[0] != int64_t(p.n_heads) * p.head_dim ||
      k.desc.ne[0] != int64_t(p.n_kv_heads) * p.head_dim) {
    return Error("vulkan: rope of layer %d: q %s or k %s does not match its %d and %d heads of %d",
                 node.layer, q.desc.ShapeString().c_str(), k.desc.ShapeString().c_str(),
                 p.n_heads, p.n_kv_heads, p.head_dim);
  }
  PETREL_ASSIGN_OR_RETURN(const BufferRange table, ctx.RopeTable(p.inv_freq, pairs));
  const struct {
    uint32_t n_tokens, n_heads, n_kv_heads, head_dim, pairs, half_split;
  } push = {n_tokens,         uint32_t(p.n_heads), uint32_t(p.n_kv_heads),
            uint32_t(p.head_dim), pairs,          p.style == RopeStyle::kHalfSplit ? 1u : 0u};
  const BufferRange bindings[] = {ValueRange(q), ValueRange(k), table};
  const uint32_t spec[] = {kRopeGroup};
  const size_t n = size_t(n_tokens) * size_t(p.n_heads + p.n_kv_heads) * pairs;
  return ctx.recorder.Dispatch(node.op, "rope", spec, bindings, push,
                               FoldGroups((n + kRopeGroup - 1) / kRopeGroup, ctx.caps));
}

Status RecordAttention(const OpContext& ctx, const Node& node, const ValueView* values,
                       const KvLayerView& kv) {
  const AttentionParams& p = node.attention;
  if (!SupportsAttention(p, ctx.caps))
    return Error("vulkan: attention of layer %d: %d heads, %d KV heads of %d are not supported",
                 node.layer, p.n_heads, p.n_kv_heads, p.head_dim);
  const char* suffix = KvSuffix(kv.dtype);
  if (suffix == nullptr)
    return Error("vulkan: no attention shaders for a %s KV cache", DTypeName(kv.dtype));
  const std::optional<uint64_t> row_bytes = RowBytes(kv.dtype, kv.row_elems);
  if (kv.k == nullptr || kv.v == nullptr || kv.block_tokens == 0 || !row_bytes ||
      kv.row_elems != size_t(p.n_kv_heads) * size_t(p.head_dim)) {
    return Error("vulkan: attention of layer %d: KV rows of %zu %s values do not hold %d heads of %d",
                 node.layer, kv.row_elems, DTypeName(kv.dtype), p.n_kv_heads, p.head_dim);
  }
  const BufferRange k_cache = AsDevice(*kv.k).Whole(), v_cache = AsDevice(*kv.v).Whole();
  // The shaders address the cache in 32-bit byte offsets through one binding.
  if (k_cache.bytes > ctx.caps.max_storage_buffer_range || k_cache.bytes > UINT32_MAX)
    return Error("vulkan: a KV layer of %zu bytes is past the device's storage buffer range",
                 size_t(k_cache.bytes));
  const uint32_t n_tokens = uint32_t(ctx.batch.n_tokens);
  if (n_tokens == 0) return Status::Ok();
  const std::string name(suffix);

  // 1. This batch's K and V rows into their slots, so later tokens of a sequence in the batch
  //    see earlier ones (the recorder's barrier orders the attention after these writes).
  const struct {
    uint32_t n_tokens, row_elems, row_bytes;
  } write_push = {n_tokens, uint32_t(kv.row_elems), uint32_t(*row_bytes)};
  const uint32_t write_spec[] = {kKvWriteGroup};
  for (const auto& [value, cache] : {std::pair{node.inputs[1], k_cache},
                                     std::pair{node.inputs[2], v_cache}}) {
    const BufferRange bindings[] = {ValueRange(values[value]), cache, ctx.device_batch.kv_slot};
    PETREL_RETURN_IF_ERROR(ctx.recorder.Dispatch(node.op, "kv_write_" + name, write_spec,
                                                 bindings, write_push,
                                                 FoldGroups(n_tokens, ctx.caps)));
  }

  // 2. Each (token, head) over its sequence's positions.
  const struct {
    uint32_t n_tokens, n_heads, n_kv_heads, head_dim, block_tokens, row_elems, row_bytes;
    float scale, softcap;
    uint32_t window;
  } push = {n_tokens,
            uint32_t(p.n_heads),
            uint32_t(p.n_kv_heads),
            uint32_t(p.head_dim),
            uint32_t(kv.block_tokens),
            uint32_t(kv.row_elems),
            uint32_t(*row_bytes),
            p.scale,
            p.logit_softcap,
            uint32_t(p.window)};
  const BufferRange bindings[] = {ValueRange(values[node.inputs[0]]),
                                  k_cache,
                                  v_cache,
                                  ctx.device_batch.token_seq,
                                  ctx.device_batch.block_tables,
                                  ctx.device_batch.block_table_begin,
                                  ctx.device_batch.n_ctx,
                                  ValueRange(values[node.output])};
  const uint32_t spec[] = {kAttentionGroup};
  return ctx.recorder.Dispatch(node.op, "attention_" + name, spec, bindings, push,
                               FoldGroups(size_t(n_tokens) * size_t(p.n_heads), ctx.caps));
}

}  // namespace petrel::vk
