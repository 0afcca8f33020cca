// Split-K attention: the CPU attention kernel's entry points that compute only some splits of
// each row's keys into partial softmax states, and fold such states into the output.
// host_attention.cc uses them to share one sequence's long context among threads, and to read
// the blocks several sequences share once for all of them. Only the CPU has them: a backend
// without (ref) computes each row whole with HostKernels::attention.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/kernel_table.h"  // AttentionArgs

namespace petrel {

// Positions per split of the keys: a row's softmax state is computed split by split, each split
// from scratch, and the splits' states are folded in split order. A tile of keys belongs to the
// split its first position falls in, so splits are fixed by position alone and a row's bits never
// depend on how many threads share its keys or which rows it is computed with; HostKernels::
// attention computes this way too. 256 keys are 16 tiles: a fold (one exp and one multiply-add
// per element) costs ~1/16 of a tile's weighted sum, and 16k keys give 64 splits to share.
constexpr size_t kAttentionSplitKeys = 256;

// One split's state of one row (query token and head) in a partials buffer: the running max, the
// sum of exp(score - max), then head_dim floats of unnormalised output. A row that sees no key
// of the split has max -inf (the fold skips it).
constexpr size_t AttentionPartialFloats(size_t head_dim) { return head_dim + 2; }

struct AttentionSplitArgs {
  // nullptr: query i is row i of q, out and the partials; else row query_rows[i] (the decode
  // tokens of several sequences, which are not consecutive in the batch).
  const int32_t* query_rows = nullptr;
  size_t split_keys = kAttentionSplitKeys;  // tests use short splits; the engine the constant
  // nullptr: every split of each query, folded, normalised into `out`. Else only splits
  // [split_begin, split_end) (clipped to each row's last), split s's state of a row at
  // partials + s * partial_split_stride + (row * n_heads + head) * AttentionPartialFloats,
  // rows of no visible key in it as empty states.
  float* partials = nullptr;
  size_t partial_split_stride = 0;  // floats
  size_t split_begin = 0, split_end = SIZE_MAX;
};

struct AttentionSplitKernels {
  // Heads [head_begin, head_end) of every query: as HostKernels::attention, or some splits
  // into the partials.
  void (*attention)(const AttentionArgs& args, const AttentionSplitArgs& split, size_t head_begin,
                    size_t head_end);
  // With the partials holding every split of each query (written in any pieces): folds them in
  // split order and normalises into `out`, the same bits as computing the rows whole.
  void (*merge)(const AttentionArgs& args, const AttentionSplitArgs& split, size_t head_begin,
                size_t head_end);
};

namespace cpu {
const AttentionSplitKernels& CpuAttentionSplitKernels();
}  // namespace cpu

}  // namespace petrel
