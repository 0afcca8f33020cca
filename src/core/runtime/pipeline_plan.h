// The pipeline split: which contiguous range of blocks each of N processes runs (the first also
// the embedding, the last the output head), and what each range costs in memory. Pure functions
// of the model's tensor sizes, so every process computes the same plan, and `petrel info
// --mpi-ranks N` prints it before anything is launched.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/model/loader.h"      // LoadedModel
#include "core/runtime/kv_cache.h"  // KvCacheOptions

namespace petrel {

// Blocks [begin, end) of one pipeline stage.
struct LayerRange {
  int begin = 0;
  int end = 0;
  bool Holds(int layer) const { return layer >= begin && layer < end; }
  int size() const { return end - begin; }
};

// "3,2,2": one positive block count per stage. Errors name the entry.
Result<std::vector<size_t>> ParseLayerCounts(const std::string& text);

// Stages of `counts[r]` consecutive blocks; the counts must cover `n_layers` exactly, one per
// stage of `n_stages`.
Result<std::vector<LayerRange>> SplitLayersByCounts(const std::vector<size_t>& counts,
                                                    size_t n_layers, size_t n_stages);

// `n_stages` contiguous ranges of at least one block each that minimise the largest stage's
// bytes: `block_bytes[l]` per block, plus `first_extra` on the first stage (the embedding) and
// `last_extra` on the last (the output head). Ties go to the split with the earliest boundaries,
// so the result is deterministic.
Result<std::vector<LayerRange>> SplitLayersByBytes(const std::vector<size_t>& block_bytes,
                                                   size_t first_extra, size_t last_extra,
                                                   size_t n_stages);

// What one stage holds in memory.
struct StageMemory {
  LayerRange layers;
  size_t weight_bytes = 0;  // its blocks, plus the embedding (first) and output head (last)
  size_t kv_bytes = 0;      // the KV storage of its blocks
  // Its activation arena for one micro-batch, plus the rows it receives.
  size_t activation_bytes = 0;
  size_t total() const { return weight_bytes + kv_bytes + activation_bytes; }
};

// Per-block weight bytes of `model` (a fused tensor counted once), and the embedding's and the
// output head's (final norm and projection; a tied head is the embedding matrix again, which
// the last stage reads whole).
struct ModelWeightBytes {
  std::vector<size_t> blocks;
  size_t embedding = 0;
  size_t head = 0;
};
ModelWeightBytes WeightBytesOf(const LoadedModel& model);

// The default split (by weight bytes) or the `counts` split when not empty.
Result<std::vector<LayerRange>> PlanStages(const LoadedModel& model, size_t n_stages,
                                           const std::vector<size_t>& counts);

// The memory of each stage of `stages` with the KV cache `kv` (n_blocks set) and passes of
// `ubatch_tokens` tokens.
Result<std::vector<StageMemory>> PlanStageMemory(const LoadedModel& model,
                                                 const std::vector<LayerRange>& stages,
                                                 const KvCacheOptions& kv, size_t ubatch_tokens);

}  // namespace petrel
