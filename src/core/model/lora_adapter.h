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

// One `--lora FILE[:SCALE]`: a GGUF adapter file or a PEFT folder (adapter_config.json +
// adapter_model.safetensors), and the user's multiplier of its update.
struct LoraFile {
  std::string path;
  float scale = 1.0f;
};

// "FILE" or "FILE:SCALE" (SCALE a finite number; a path with ':' in it takes the scale suffix
// only when what follows the last ':' is a number).
Result<LoraFile> ParseLoraArgument(std::string_view text);

// The update of one matrix the graph reads: out += B (A x). The scales (the user's and
// alpha/rank) are folded into B, so the graph needs only two matrix products and an add.
struct LoraDelta {
  TensorView a;  // f32, GGUF shape [n_in, rank]: rank rows of n_in
  TensorView b;  // f32, [rank, n_out]: n_out rows of rank, scaled
};

// The update of one stored tensor, for merging: rows [first_row, first_row + b.ne[1]) of the
// tensor named `tensor` (GGUF name) gain B·A.
struct LoraMerge {
  std::string tensor;
  int64_t first_row = 0;
  LoraDelta delta;
};

// Every adapter given, resolved against one model's weights.
class LoraSet {
 public:
  LoraSet() = default;
  LoraSet(const LoraSet&) = delete;
  LoraSet& operator=(const LoraSet&) = delete;

  // Writes into `out` the graph `graph` (built over `weights`: the model's or their placed
  // copy) with the updates inserted: each adapted mat_mul's output becomes W x + B (A x), and a
  // gated_ffn whose gate or up is adapted is split into its two mat_muls and silu_mul. Other
  // nodes and every value id of `graph` are unchanged; the updates' values are appended.
  void AddToGraph(const ModelWeights& weights, const Graph& graph, Graph* out) const;

  // A copy whose A and B views went through `place(layer, view)` (layer: a block, or the block
  // count for the output head), for a graph over placed weights. It borrows this set's buffers.
  using PlaceFn = std::function<Result<TensorView>(int layer, const TensorView& view)>;
  Result<std::unique_ptr<LoraSet>> Placed(const PlaceFn& place) const;

  // The merges into the stored tensor `gguf_name` (empty when it is not adapted).
  std::vector<const LoraMerge*> MergesFor(std::string_view gguf_name) const;

  bool empty() const { return deltas_.empty(); }
  size_t n_adapted() const { return deltas_.size(); }  // matrices the graph reads, adapted

 private:
  friend class LoraSetBuilder;
  // Keyed by (layer, weight index in the family's table); the output head is (n_layers, 0).
  std::map<std::pair<int, size_t>, std::vector<LoraDelta>> deltas_;
  std::vector<LoraMerge> merges_;
  std::deque<std::vector<float>> owned_;  // converted A and scaled B
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
