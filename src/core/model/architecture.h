// What an architecture provides, as data: the weights it reads (a table of specs: names, shapes,
// kind, presence), how to read its config from GGUF metadata or config.json and write it back,
// and how to build its graph for a batch. Generic code (loader, converters, placement) iterates
// the tables and never names a family's tensors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/base/tensor.h"
#include "core/graph/graph.h"
#include "core/model/model_config.h"

namespace petrel {

class GgufFile;
class GgufWriter;
struct Architecture;

// How a weight is stored and used. A matrix maps `n_in` to `n_out` features (GGUF shape
// [n_in, n_out]), may be quantized and is read by matrix products; a vector holds `n_in` values
// (norm weights, biases) and is converted to f32 at load: it is tiny.
// An experts tensor stacks `n_experts` matrices of the same shape (GGUF [n_in, n_out,
// n_experts]); Hugging Face checkpoints store one matrix per expert, named with `*` in place of
// the expert index, which the loader stacks into one owned tensor.
// A heads tensor stacks one matrix per attention head (GGUF [n_in, n_out, n_heads]): DeepSeek's
// attn_k_b and attn_v_b, which the latent attention multiplies head by head.
enum class WeightKind : uint8_t { kMatrix, kVector, kExperts, kHeads };

struct WeightSpec;
// A weight made at load from another tensor whose layout needs a copy: DeepSeek's HF kv_b_proj
// ([heads x (nope + v), kv_lora]) holds attn_k_b transposed and attn_v_b interleaved per head.
// `make` fills `out` (its desc set by the loader: the source's type, the spec's shape) from
// `from`, or says why it cannot (a block-quantized source cannot be transposed).
struct WeightDerivation {
  const char* gguf_name;  // the source under GGUF names (nullptr: none), used when the
                          // weight's own tensor is absent (legacy files)
  const char* hf_name;    // the source under HF names: HF checkpoints always derive
  Status (*make)(const TensorView& from, const ModelConfig& config, TensorView* out);
};

struct WeightShape {
  int64_t n_in = 0;
  int64_t n_out = 1;  // vectors: 1, or one row of n_in per expert (experts' biases)
};

// One weight of an architecture. Names of block weights are the part after the block prefix:
// GGUF "blk.<l>." and the family's `hf_layer_prefix` + "<l>.".
struct WeightSpec {
  const char* gguf_name = nullptr;  // "attn_q.weight"
  const char* hf_name = nullptr;    // "self_attn.q_proj.weight"
  WeightKind kind = WeightKind::kMatrix;
  WeightShape (*shape)(const ModelConfig& config) = nullptr;
  // nullptr: always required. Otherwise the weight is required when this returns true and may
  // be absent (an empty view) when it returns false; e.g. Q/K/V biases follow `qkv_bias`.
  bool (*required)(const ModelConfig& config) = nullptr;
  // The rows (a vector's elements) follow the RoPE pair layout of the heads: Q and K and their
  // biases. Converters permute them when the target layout differs from the source's.
  bool rope_rows = false;
  // Added to a vector read under its HF name: Gemma's checkpoints store w and apply 1 + w,
  // its GGUFs store 1 + w.
  float hf_offset = 0.0f;
  // >= 0: this weight is rows [first_row(config), first_row + n_out) of the block's weight at
  // index `fused_in` (Phi-3's fused qkv and gate_up tensors). It is bound as a view into that
  // tensor's mapped rows (no copy) and is never stored or counted on its own.
  int fused_in = -1;
  int64_t (*first_row)(const ModelConfig& config) = nullptr;
  // Hugging Face layouts other than the GGUF one (gpt-oss's experts), copied into the GGUF
  // layout at load. `hf_stride` > 1: this weight's output features (a vector's elements) are
  // every hf_stride-th one of the HF tensor, from `hf_first` (gate and up interleaved in one
  // tensor). `hf_input_major`: matrices stored [n_in][n_out] (x·W), the transpose of
  // nn.Linear's. Experts so marked are one [n_experts, ...] tensor (no `*` in the name).
  int hf_stride = 1;
  int hf_first = 0;
  bool hf_input_major = false;
  // nullptr: every block has this weight. Otherwise only the blocks for which it returns true
  // (DeepSeek's leading dense blocks have an FFN where the others have experts); in the other
  // blocks it is absent and never looked up.
  bool (*in_layer)(const ModelConfig& config, int64_t layer) = nullptr;
  const WeightDerivation* derived = nullptr;

  bool IsFusedPart() const { return fused_in >= 0; }
  bool HfRearranged() const { return hf_stride > 1 || hf_input_major; }
  bool IsRequired(const ModelConfig& config) const { return !required || required(config); }
  bool InLayer(const ModelConfig& config, int64_t layer) const {
    return layer < 0 || !in_layer || in_layer(config, layer);
  }
};

// True when every entry of a family's table (built by index) was filled: for static_assert.
template <size_t N>
constexpr bool AllSpecsSet(const std::array<WeightSpec, N>& specs) {
  for (const WeightSpec& spec : specs) {
    if (!spec.gguf_name || !spec.hf_name || !spec.shape) return false;
  }
  return true;
}

// Views of one block's weights, indexed by the family's own weight enum (`L[kWq]`); absent
// optional tensors have data == nullptr. Vectors are f32.
class LayerWeights {
 public:
  LayerWeights() = default;
  explicit LayerWeights(std::span<const WeightSpec> specs) : specs_(specs), views_(specs.size()) {}

  size_t size() const { return views_.size(); }
  TensorView& operator[](size_t index) {
    PETREL_DCHECK(index < views_.size());
    return views_[index];
  }
  const TensorView& operator[](size_t index) const {
    PETREL_DCHECK(index < views_.size());
    return views_[index];
  }
  const WeightSpec& spec(size_t index) const { return specs_[index]; }
  std::span<const WeightSpec> specs() const { return specs_; }
  std::span<const TensorView> views() const { return views_; }

 private:
  std::span<const WeightSpec> specs_;  // the family's table (static storage)
  std::vector<TensorView> views_;      // one per spec
};

struct ModelWeights {
  TensorView token_embd;
  // The family's `input_weights`, indexed by its own enum (BERT's position and token-type
  // tables and embedding norm); empty for families without.
  LayerWeights input;
  TensorView output_norm;
  TensorView output;  // == token_embd when tied
  std::vector<LayerWeights> layers;
  // RoPE's rotation frequency per pair, scaling applied (ModelConfig::rope): the rope nodes point
  // here, and each backend turns positions into angles with it.
  std::vector<double> rope_inv_freq;
  // The windowed layers' frequencies when they differ (ModelConfig::rope_local_base > 0).
  std::vector<double> rope_inv_freq_local;
};

using ConfigFromGgufFn = Result<ModelConfig>(const GgufFile& file, const Architecture& arch);
using ConfigFromHfFn = Result<ModelConfig>(const nlohmann::json& config, const Architecture& arch);
// Writes the `<arch>.*` hyperparameter keys that `ConfigFromGgufFn` reads back.
using ConfigToGgufFn = void(const ModelConfig& config, const Architecture& arch,
                            GgufWriter* writer);
// Appends the forward pass of `n_tokens` tokens, keeping `n_selected` rows for the logits.
using BuildGraphFn = void(const ModelConfig& config, const ModelWeights& weights, size_t n_tokens,
                          size_t n_selected, Graph* graph);

// What a family file (arch/<family>.cc) defines, as
// `extern constinit const ArchitectureFamily kFooFamily = {...};` (extern: the registry names it;
// constinit: it is ready before any lookup): its weight tables and functions. Several rows of
// the registry may share one family and differ in data (Llama, Mistral, Qwen2).
struct ArchitectureFamily {
  const char* hf_layer_prefix;  // "model.layers.": HF names of block l are prefix + "l." + name
  std::span<const WeightSpec> layer_weights;  // indexed by the family's weight enum
  // The embedding, the final norm and the output head. When the config says the embeddings
  // are tied, an absent `output` is the embedding table and an absent `token_embd` is read
  // from `output`'s tensor (checkpoints store the tied matrix under either name).
  WeightSpec token_embd, output_norm, output;
  ConfigFromGgufFn* config_from_gguf;
  ConfigFromHfFn* config_from_hf;
  ConfigToGgufFn* config_to_gguf;
  BuildGraphFn* build_graph;
  // Weights outside the blocks read with the embedding (names without a block prefix), bound
  // into ModelWeights::input on the embedding's backend.
  std::span<const WeightSpec> input_weights = {};
};

// One row of the registry (arch/registry.cc): a family plus the names and data of one variant.
// It derives from its family so callers reach `arch->build_graph` and `arch->layer_weights`
// directly.
struct Architecture : ArchitectureFamily {
  const char* gguf_name;      // general.architecture
  const char* hf_class;       // config.json "architectures"[0]
  RopeStyle gguf_rope_style;  // how that family's GGUF files lay out Q/K rows
  bool qkv_bias;
};

// The full names of a weight: `layer` < 0 for the non-block weights.
std::string GgufWeightName(const WeightSpec& spec, int layer);
std::string HfWeightName(const ArchitectureFamily& family, const WeightSpec& spec, int layer);

// `arch`'s config from a config.json, with every JSON type error inside the family's reader
// (a `value()` or `get()` of the wrong type) turned into a one-line error, as from a
// malformed file. What the loader calls; `config_from_hf` directly may throw.
Result<ModelConfig> ConfigFromHf(const nlohmann::json& config, const Architecture& arch);

// Lookups over the registry (arch/registry.cc); nullptr when unknown.
const Architecture* FindArchitectureByGguf(std::string_view name);
const Architecture* FindArchitectureByHf(std::string_view hf_class, std::string_view model_type);
std::string KnownArchitectures();

}  // namespace petrel
