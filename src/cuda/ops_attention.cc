// Attention over the paged KV cache, through the kernels of attention/attention.h: the batch's
// K/V rows written to their slots, then each query over its sequence's blocks.
#include "cuda/attention/attention.h"
#include "cuda/ops.h"

namespace petrel::cuda {

bool SupportsKvType(DType type) {
  return type == DType::kF32 || type == DType::kF16 || type == DType::kQ8_0;
}

Status RunAttention(const OpContext& ctx, const Node& node, const ValueView* values,
                    const KvLayerView& kv) {
  const AttentionParams& p = node.attention;
  if (!SupportsKvType(kv.dtype) || !SupportsAttention(p, kv.dtype)) {
    return Error(
        "cuda: attention of layer %d: %d heads, %d KV heads of %d with a %s KV cache are "
        "not supported",
        node.layer, p.n_heads, p.n_kv_heads, p.head_dim, DTypeName(kv.dtype));
  }
  if (kv.k == nullptr || kv.v == nullptr || kv.block_tokens == 0 ||
      kv.row_elems != size_t(p.n_kv_heads) * size_t(p.head_dim) ||
      !RowBytes(kv.dtype, kv.row_elems)) {
    return Error("cuda: attention of layer %d: KV rows of %zu %s values do not hold %d heads of %d",
                 node.layer, kv.row_elems, DTypeName(kv.dtype), p.n_kv_heads, p.head_dim);
  }
  const int32_t n_tokens = int32_t(ctx.batch.n_tokens);
  if (n_tokens == 0) return Status::Ok();
  const DeviceBatch& batch = ctx.device_batch;
  AttentionArgs args;
  args.params = p;
  args.n_tokens = n_tokens;
  args.max_ctx = int32_t(ctx.batch.max_ctx);
  args.kv_type = kv.dtype;
  args.block_tokens = int32_t(kv.block_tokens);
  args.k_cache = AsDevice(*kv.k).data();
  args.v_cache = AsDevice(*kv.v).data();
  args.q = ValuePtr(values[node.inputs[0]]);
  args.k = ValuePtr(values[node.inputs[1]]);
  args.v = ValuePtr(values[node.inputs[2]]);
  args.out = ValuePtr(values[node.output]);
  args.kv_slot = batch.kv_slot;
  args.n_ctx = batch.n_ctx;
  args.token_seq = batch.token_seq;
  args.block_tables = batch.block_tables;
  args.block_table_begin = batch.block_table_begin;
  Scratch scratch(ctx.allocator);
  PETREL_RETURN_IF_ERROR(scratch.Take(AttentionScratchBytes(args)));
  args.scratch = scratch.data();
  args.scratch_bytes = scratch.bytes();
  // The writes first, so later tokens of a sequence in this batch see earlier ones (both on the
  // one stream).
  PETREL_RETURN_IF_ERROR(LaunchStatus(LaunchKvWrite(ctx.stream, args), node));
  return LaunchStatus(LaunchAttention(ctx.stream, args), node);
}

}  // namespace petrel::cuda
