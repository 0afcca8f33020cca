#include "cuda/batch_arrays.h"

#include <algorithm>

namespace petrel::cuda {
namespace {

constexpr size_t kAlignElems = 64;

size_t AlignUp(size_t n) { return (n + kAlignElems - 1) / kAlignElems * kAlignElems; }

}  // namespace

BatchLayout PackBatch(const BatchContext& batch, std::vector<int32_t>* out) {
  const size_t n = batch.n_tokens;
  const size_t n_begin = batch.block_table_begin ? batch.n_seqs + 1 : 0;
  const size_t n_table =
      batch.block_table_begin ? size_t(batch.block_table_begin[batch.n_seqs]) : 0;
  struct Part {
    const int32_t* data;
    size_t count;
    size_t* offset;
  };
  BatchLayout layout;
  const Part parts[] = {
      {batch.tokens, n, &layout.tokens},
      {batch.positions, n, &layout.positions},
      {batch.token_seq, n, &layout.token_seq},
      {batch.block_tables, n_table, &layout.block_tables},
      {batch.block_table_begin, n_begin, &layout.block_table_begin},
      {batch.n_ctx, n, &layout.n_ctx},
      {batch.kv_slot, n, &layout.kv_slot},
      {batch.selected_rows, batch.n_selected, &layout.selected_rows},
  };
  size_t total = 0;
  for (const Part& part : parts) {
    *part.offset = total;
    total += AlignUp(part.data ? part.count : 0);
  }
  layout.total = std::max<size_t>(total, 1);
  out->assign(layout.total, 0);
  for (const Part& part : parts) {
    if (part.data && part.count) std::copy_n(part.data, part.count, out->data() + *part.offset);
  }
  return layout;
}

DeviceBatch PointersInto(const int32_t* base, const BatchLayout& layout) {
  return DeviceBatch{
      base + layout.tokens,       base + layout.positions,         base + layout.token_seq,
      base + layout.block_tables, base + layout.block_table_begin, base + layout.n_ctx,
      base + layout.kv_slot,      base + layout.selected_rows};
}

}  // namespace petrel::cuda
