// attention on a host backend: the batch's K/V rows written to the cache, then the attention
// kernel's work shared among threads. A work item is up to kAttentionQueries tokens of one
// sequence and a KV head with its GQA query heads, over every split of its keys, or (split-K,
// decoding one or a few sequences) over one split, or (shared-prefix attention) the decode
// tokens of every sequence sharing the leading blocks over one of those blocks' splits. Items
// that compute only some splits write partial states that a second pass folds in split order.
// The kernel's contract (kernel_table.h) makes a token's result the same bits whichever item
// computed which of its splits, so none of these choices shows in the output.
#include <algorithm>
#include <cstring>

#include "cpu/attention/attention_split.h"
#include "cpu/host_backend.h"

namespace petrel {
namespace {

// Query tokens per attention work item: enough to amortise staging each K/V tile as f32 over
// many rows, few enough that a 128-token prompt still makes several items per thread.
constexpr size_t kAttentionQueries = 16;

// Leading blocks two block tables have in common (the same physical blocks: prefix caching or
// a fork shares them).
size_t CommonBlocks(const int32_t* a, size_t a_blocks, const int32_t* b, size_t b_blocks) {
  const size_t n = std::min(a_blocks, b_blocks);
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

void HostBackend::RunAttention(const Node& node, const TensorView* values, const PagedKvView& kv) {
  const BatchContext& batch = batch_;
  const float* q = values[node.inputs[0]].as<const float>();
  const float* k = values[node.inputs[1]].as<const float>();
  const float* v = values[node.inputs[2]].as<const float>();
  float* out = values[node.output].as<float>();
  const size_t kv_dim = kv.row_elems;
  const size_t kv_row_bytes = *RowBytes(kv.dtype, kv_dim);  // checked when the cache was made
  // 1. Write this batch's K/V rows into their slots, so later tokens of a sequence in the same
  //    batch see earlier ones.
  pool_.ParallelFor(batch.n_tokens, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      const size_t slot_offset = size_t(batch.kv_slot[t]) * kv_row_bytes;
      kernels_.row_from_f32(kv.dtype, k + t * kv_dim, kv_dim,
                            static_cast<char*>(kv.k) + slot_offset);
      kernels_.row_from_f32(kv.dtype, v + t * kv_dim, kv_dim,
                            static_cast<char*>(kv.v) + slot_offset);
    }
  });
  AttendPaged(q, node.attention, kv, out);
}

void HostBackend::PlanSharedPrefixes(const AttentionParams& p, size_t block_tokens) {
  const BatchContext& batch = batch_;
  shared_groups_.clear();
  shared_rows_.clear();
  shared_ctx_.clear();
  if (!shared_prefix_attention_ || split_kernels_ == nullptr || !p.causal) return;
  // Decode tokens (chunks of one token), grouped by their sequence's first block.
  shared_order_.clear();
  for (size_t c = 0; c < attention_chunks_.size(); ++c) {
    const AttentionChunk& chunk = attention_chunks_[c];
    const size_t seq = size_t(batch.token_seq[chunk.first_token]);
    if (chunk.n_tokens == 1 && batch.block_table_begin[seq + 1] > batch.block_table_begin[seq]) {
      shared_order_.push_back(c);
    }
  }
  auto table = [&](size_t c) {
    return batch.block_tables +
           batch.block_table_begin[batch.token_seq[attention_chunks_[c].first_token]];
  };
  auto table_blocks = [&](size_t c) {
    const size_t seq = size_t(batch.token_seq[attention_chunks_[c].first_token]);
    return size_t(batch.block_table_begin[seq + 1] - batch.block_table_begin[seq]);
  };
  std::sort(shared_order_.begin(), shared_order_.end(), [&](size_t a, size_t b) {
    return table(a)[0] != table(b)[0] ? table(a)[0] < table(b)[0] : a < b;
  });
  for (size_t begin = 0; begin < shared_order_.size();) {
    size_t end = begin + 1;
    while (end < shared_order_.size() &&
           table(shared_order_[end])[0] == table(shared_order_[begin])[0]) {
      ++end;
    }
    const size_t first = shared_order_[begin];
    size_t common = table_blocks(first);
    for (size_t i = begin + 1; i < end; ++i) {
      common =
          std::min(common, CommonBlocks(table(first), table_blocks(first), table(shared_order_[i]),
                                        table_blocks(shared_order_[i])));
    }
    // Whole splits inside the common blocks: the tiles of split s start before (s + 1) * S and
    // stay in their block, so they lie in the common blocks when (s + 1) * S <= its positions.
    const size_t shared_splits = common * block_tokens / kAttentionSplitKeys;
    if (end - begin >= 2 && shared_splits > 0) {
      SharedGroup group;
      group.rows_begin = shared_rows_.size();
      group.n_rows = end - begin;
      group.block_table = table(first);
      group.n_splits = shared_splits;
      for (size_t i = begin; i < end; ++i) {
        AttentionChunk& chunk = attention_chunks_[shared_order_[i]];
        chunk.shared_splits = shared_splits;
        shared_rows_.push_back(int32_t(chunk.first_token));
        shared_ctx_.push_back(batch.n_ctx[chunk.first_token]);
      }
      shared_groups_.push_back(group);
    }
    begin = end;
  }
}

void HostBackend::AttendPaged(const float* q, const AttentionParams& p, const PagedKvView& kv,
                              float* out) {
  const BatchContext& batch = batch_;
  const size_t n_heads = size_t(p.n_heads), n_kv_heads = size_t(p.n_kv_heads);
  const size_t head_dim = size_t(p.head_dim);
  const size_t q_dim = n_heads * head_dim;
  auto n_ctx_of = [&](size_t t) { return size_t(p.causal ? batch.n_ctx[t] : batch.n_ctx_all[t]); };
  // 2. Chunks of up to kAttentionQueries tokens of one sequence (consecutive in the batch, as a
  //    prompt's are): the kernel loads each K/V tile once for a chunk's tokens.
  attention_chunks_.clear();
  for (size_t t = 0; t < batch.n_tokens;) {
    size_t end = t + 1;
    while (end < batch.n_tokens && end - t < kAttentionQueries &&
           batch.token_seq[end] == batch.token_seq[t]) {
      ++end;
    }
    AttentionChunk chunk{t, end - t};
    for (size_t u = t; u < end; ++u) {
      const size_t n_ctx = n_ctx_of(u);
      chunk.cost += p.window > 0 ? std::min(n_ctx, size_t(p.window)) : n_ctx;
      chunk.max_ctx = std::max(chunk.max_ctx, n_ctx);
    }
    attention_chunks_.push_back(chunk);
    t = end;
  }
  // Costliest first: threads claim chunks of items in order, so the cheap ones even out the end.
  // std::sort, not stable_sort, which may allocate; ties keep batch order.
  std::sort(attention_chunks_.begin(), attention_chunks_.end(),
            [](const AttentionChunk& a, const AttentionChunk& b) {
              return a.cost != b.cost ? a.cost > b.cost : a.first_token < b.first_token;
            });
  // 3. Decode tokens of sequences sharing leading blocks: those blocks' whole splits are read
  //    once for all of them.
  PlanSharedPrefixes(p, kv.block_tokens);
  const size_t group = n_heads / n_kv_heads;
  const size_t n_threads = pool_.size();
  // 4. Split-K: when the chunks' KV heads make fewer than four items per thread (decoding one or
  //    a few sequences; ParallelFor hands out four chunks per thread, so that a thread the host
  //    preempts does not hold the step), a chunk whose keys span several splits is cut by split
  //    as well.
  const bool split_k = split_kernels_ != nullptr && n_threads > 1 &&
                       attention_chunks_.size() * n_kv_heads < 4 * n_threads;
  // Splits per chunk: at least the kernel's (a split is the tiles starting in it, and the last
  // tile starts at or before max_ctx - 1), so a spare item returns at once.
  size_t max_splits = 1;
  bool any_partials = !shared_groups_.empty();
  for (AttentionChunk& chunk : attention_chunks_) {
    chunk.n_splits = (chunk.max_ctx - 1) / kAttentionSplitKeys + 1;
    chunk.split_items = split_k && chunk.n_splits > 1;
    if (chunk.split_items || chunk.shared_splits > 0) {
      any_partials = true;
      max_splits = std::max(max_splits, chunk.n_splits);
    }
  }
  // An item takes a KV head's whole GQA group, which then shares each K/V tile, unless that
  // leaves threads idle (decoding one token with few KV heads and nothing to split): then one
  // query head per item.
  const size_t heads_per_item =
      any_partials || attention_chunks_.size() * n_kv_heads >= 2 * n_threads ? group : 1;
  const size_t items_per_split = n_heads / heads_per_item;
  const size_t partial_floats = AttentionPartialFloats(head_dim);
  const size_t partial_stride = batch.n_tokens * n_heads * partial_floats;  // per split
  if (any_partials && attention_partials_.size() < max_splits * partial_stride) {
    attention_partials_.resize(max_splits * partial_stride);
  }
  // Items: the shared splits first (the costliest: every sharing token's rows), then the chunks.
  attention_items_.clear();
  for (size_t g = 0; g < shared_groups_.size(); ++g) {
    for (size_t split = 0; split < shared_groups_[g].n_splits; ++split) {
      for (size_t i = 0; i < items_per_split; ++i) {
        attention_items_.push_back(
            {g, i * heads_per_item, split, split + 1, AttentionItem::kShared});
      }
    }
  }
  for (size_t c = 0; c < attention_chunks_.size(); ++c) {
    const AttentionChunk& chunk = attention_chunks_[c];
    if (chunk.split_items) {
      // Split by split, each split's KV heads in turn: the heads' slices of a cached row lie
      // side by side, so a thread's run of items reads whole rows, not one head's slice of each
      // row in a long walk per head (TinyLlama's shape at depth 16384: 1.35x faster).
      for (size_t split = chunk.shared_splits; split < chunk.n_splits; ++split) {
        for (size_t i = 0; i < items_per_split; ++i) {
          attention_items_.push_back(
              {c, i * heads_per_item, split, split + 1, AttentionItem::kSplits});
        }
      }
      continue;
    }
    for (size_t i = 0; i < items_per_split; ++i) {
      if (chunk.shared_splits > 0) {
        attention_items_.push_back(
            {c, i * heads_per_item, chunk.shared_splits, SIZE_MAX, AttentionItem::kSplits});
      } else {
        attention_items_.push_back({c, i * heads_per_item, 0, SIZE_MAX, AttentionItem::kWhole});
      }
    }
  }
  auto common_args = [&]() {
    AttentionArgs args;
    args.kv = &kv;
    args.n_heads = n_heads;
    args.n_kv_heads = n_kv_heads;
    args.head_dim = head_dim;
    args.scale = p.scale;
    args.softcap = p.logit_softcap;
    args.window = size_t(p.window);
    args.sinks = p.sinks ? p.sinks->as<const float>() : nullptr;
    return args;
  };
  auto chunk_args = [&](const AttentionChunk& chunk) {
    AttentionArgs args = common_args();
    args.q = q + chunk.first_token * q_dim;
    args.block_table =
        batch.block_tables + batch.block_table_begin[batch.token_seq[chunk.first_token]];
    args.n_ctx = (p.causal ? batch.n_ctx : batch.n_ctx_all) + chunk.first_token;
    args.n_queries = chunk.n_tokens;
    args.out = out + chunk.first_token * q_dim;
    return args;
  };
  // A chunk's partials: its tokens' rows, as args.q and args.out start at its first token.
  auto chunk_partials = [&](const AttentionChunk& chunk) {
    AttentionSplitArgs split;
    split.partials = attention_partials_.data() + chunk.first_token * n_heads * partial_floats;
    split.partial_split_stride = partial_stride;
    return split;
  };
  pool_.ParallelFor(attention_items_.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const AttentionItem& item = attention_items_[i];
      const size_t head_end = item.head_begin + heads_per_item;
      if (item.kind == AttentionItem::kWhole) {
        kernels_.attention(chunk_args(attention_chunks_[item.index]), item.head_begin, head_end);
        continue;
      }
      AttentionArgs args;
      AttentionSplitArgs split;
      if (item.kind == AttentionItem::kShared) {
        // Rows of several sequences, picked by their token's index in the batch.
        const SharedGroup& shared = shared_groups_[item.index];
        args = common_args();
        args.q = q;
        args.block_table = shared.block_table;
        args.n_ctx = shared_ctx_.data() + shared.rows_begin;
        args.n_queries = shared.n_rows;
        args.out = out;
        split.query_rows = shared_rows_.data() + shared.rows_begin;
        split.partials = attention_partials_.data();
        split.partial_split_stride = partial_stride;
      } else {
        args = chunk_args(attention_chunks_[item.index]);
        split = chunk_partials(attention_chunks_[item.index]);
      }
      split.split_begin = item.split_begin;
      split.split_end = item.split_end;
      split_kernels_->attention(args, split, item.head_begin, head_end);
    }
  });
  if (!any_partials) return;
  // 5. The partial states of the chunks computed in pieces, folded per KV head's group.
  attention_merges_.clear();
  for (size_t c = 0; c < attention_chunks_.size(); ++c) {
    const AttentionChunk& chunk = attention_chunks_[c];
    if (!chunk.split_items && chunk.shared_splits == 0) continue;
    for (size_t i = 0; i < items_per_split; ++i) {
      attention_merges_.push_back({c, i * heads_per_item, 0, SIZE_MAX, AttentionItem::kWhole});
    }
  }
  pool_.ParallelFor(attention_merges_.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const AttentionItem& item = attention_merges_[i];
      const AttentionChunk& chunk = attention_chunks_[item.index];
      split_kernels_->merge(chunk_args(chunk), chunk_partials(chunk), item.head_begin,
                            item.head_begin + heads_per_item);
    }
  });
}

}  // namespace petrel
