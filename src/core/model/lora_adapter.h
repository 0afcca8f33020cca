// LoRA adapters: low-rank updates W + s·B·A of a model's matrices, read from llama.cpp's GGUF
// adapters or PEFT folders, applied as extra graph nodes beside the base matrix products (the
// mapped base weights are never written) or merged into a copy (`petrel quantize --lora`).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/base/tensor.h"
#include "core/graph/graph.h"

namespace petrel {

struct Architecture;
struct ModelConfig;
struct ModelWeights;

// One `--lora [NAME=]FILE[:SCALE]`: a GGUF adapter file or a PEFT folder (adapter_config.json +
// adapter_model.safetensors), the user's multiplier of its update, and the name requests use.
struct LoraFile {
  std::string path;
  float scale = 1.0f;
  std::string name;  // the file's stem (a folder's name) unless given
};

// "FILE", "FILE:SCALE", "NAME=FILE" or "NAME=FILE:SCALE" (SCALE a finite number; a path with
// ':' in it takes the scale suffix only when what follows the last ':' is a number; NAME is
// letters, digits, '_', '-' and '.', and a FILE that exists as written is never split at '=').
Result<LoraFile> ParseLoraArgument(std::string_view text);

// The update of one matrix the graph reads: out += s B (A x), s the scale its adapter has for
// the row (LoraApplication). The adapter's own factor (alpha/rank) is folded into B; the user's
// scale is not, so that each sequence of a batch can pick its adapters and their scales.
struct LoraDelta {
  TensorView a;     // f32, GGUF shape [n_in, rank]: rank rows of n_in
  TensorView b;     // f32, [rank, n_out]: n_out rows of rank, times alpha/rank
  int adapter = 0;  // index of its adapter in the files given to LoadLoraAdapters
};

// The update of one stored tensor, for merging: rows [first_row, first_row + b.ne[1]) of the
// tensor named `tensor` (GGUF name) gain scale·B·A.
struct LoraMerge {
  std::string tensor;
  int64_t first_row = 0;
  LoraDelta delta;
  float scale = 1.0f;  // the adapter's scale as loaded (LoraFile::scale)
};

// How one adapter applies to the rows (tokens) of a pass: with one scale for every row, or
// with each row's own scale (a sequence's choice; 0 for sequences without the adapter), read
// from BatchContext::row_scales by a scale_rows node.
struct LoraApplication {
  float uniform = 1.0f;     // every row's scale when row_scales < 0 (0: the adapter is skipped)
  int32_t row_scales = -1;  // else the index of the adapter's vector in BatchContext::row_scales

  bool applies() const { return row_scales >= 0 || uniform != 0.0f; }
};

// Every adapter given, resolved against one model's weights.
class LoraSet {
 public:
  LoraSet() = default;
  LoraSet(const LoraSet&) = delete;
  LoraSet& operator=(const LoraSet&) = delete;

  // Writes into `out` the graph `graph` (built over `weights`: the model's or their placed
  // copy) with the updates inserted: each adapted mat_mul's output becomes W x + s B (A x) for
  // each adapter that applies (`adapters[k]`, one per adapter; a uniform scale of 1 adds no
  // node, another uniform scale a scale node, per-row scales a scale_rows node on the rank-wide
  // A x), and a gated_ffn whose gate or up is adapted is split into its two mat_muls and
  // silu_mul. Other nodes and every value id of `graph` are unchanged; the updates' values are
  // appended.
  void AddToGraph(const ModelWeights& weights, const Graph& graph,
                  std::span<const LoraApplication> adapters, Graph* out) const;
  // The applications of the adapters as loaded: each with its own scale on every row.
  std::vector<LoraApplication> DefaultApplications() const;
  // Every adapter with its own row-scale vector: the most nodes and values a pass can get.
  std::vector<LoraApplication> PerRowApplications() const;

  // A copy whose A and B views went through `place(layer, view)` (layer: a block, or the block
  // count for the output head), for a graph over placed weights. It borrows this set's buffers.
  using PlaceFn = std::function<Result<TensorView>(int layer, const TensorView& view)>;
  Result<std::unique_ptr<LoraSet>> Placed(const PlaceFn& place) const;

  // The merges into the stored tensor `gguf_name` (empty when it is not adapted).
  std::vector<const LoraMerge*> MergesFor(std::string_view gguf_name) const;

  bool empty() const { return deltas_.empty(); }
  size_t n_adapters() const { return default_scales_.size(); }
  // Each adapter's scale as loaded (LoraFile::scale).
  std::span<const float> default_scales() const { return default_scales_; }
  size_t n_adapted() const { return deltas_.size(); }  // matrices the graph reads, adapted

 private:
  friend class LoraSetBuilder;
  // Keyed by (layer, weight index in the family's table); the output head is (n_layers, 0).
  std::map<std::pair<int, size_t>, std::vector<LoraDelta>> deltas_;
  std::vector<LoraMerge> merges_;
  std::deque<std::vector<float>> owned_;  // converted A and scaled B
  std::vector<float> default_scales_;     // (n_adapters)
};

// Reads each adapter and checks it against the model: the architecture (GGUF adapters), every
// target a matrix of the model with matching shapes, a positive rank and alpha. Errors name the
// adapter and the tensor.
Result<std::unique_ptr<LoraSet>> LoadLoraAdapters(const Architecture& arch,
                                                  const ModelConfig& config,
                                                  const ModelWeights& weights,
                                                  std::span<const LoraFile> files);

// Adds the merges of `merges` into one dequantized row `row` (index `row_index` of its tensor,
// n_in floats).
void ApplyLoraMerges(std::span<const LoraMerge* const> merges, int64_t row_index, float* row,
                     size_t n_in);

}  // namespace petrel
