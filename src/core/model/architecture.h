// What an architecture provides: its weights (as views), how to read its config from GGUF
// metadata or config.json, how to find its tensors, and how to build its graph for a batch.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/graph/graph.h"
#include "core/model/model_config.h"
#include "core/base/status.h"
#include "core/base/tensor.h"

namespace petrel {

class GgufFile;

// Views of one block's weights; absent optional tensors have data == nullptr. Norm weights and
// biases are f32 (converted at load if the file stores them otherwise: they are tiny).
struct LayerWeights {
  TensorView attn_norm, wq, wk, wv, wo;
  TensorView bq, bk, bv;  // optional (Qwen2)
  TensorView ffn_norm, w_gate, w_up, w_down;
};

struct ModelWeights {
  TensorView token_embd;
  TensorView output_norm;
  TensorView output;  // == token_embd when tied
  std::vector<LayerWeights> layers;
  // RoPE's rotation frequency per pair, scaling applied (ModelConfig::rope): the rope nodes point
  // here, and each backend turns positions into angles with it.
  std::vector<double> rope_inv_freq;
};

// Finds tensors by name in a GGUF file or a Hugging Face folder; each caller passes both names
// and the source picks its own. Returns nullptr when absent.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const TensorView* Find(std::string_view gguf_name, std::string_view hf_name) = 0;
  virtual std::string Describe() const = 0;  // for messages: the file or folder
  // A copy of `view` converted to f32 and owned by the source (for norms and biases).
  virtual Result<TensorView> ToF32(const TensorView& view) = 0;
};

// One architecture family. Only core/models/ knows the names in it.
struct Architecture {
  const char* gguf_name;        // general.architecture
  const char* hf_class;         // config.json "architectures"[0]
  RopeStyle gguf_rope_style;    // how that family's GGUF files lay out Q/K rows
  bool qkv_bias;
  Result<ModelConfig> (*config_from_gguf)(const GgufFile& file, const Architecture& arch);
  Result<ModelConfig> (*config_from_hf)(const nlohmann::json& config, const Architecture& arch);
  Status (*bind_weights)(const ModelConfig& config, WeightSource& source, ModelWeights* weights);
  // Appends the forward pass of `n_tokens` tokens, keeping `n_selected` rows for the logits.
  void (*build_graph)(const ModelConfig& config, const ModelWeights& weights, size_t n_tokens,
                      size_t n_selected, Graph* graph);
};

// Lookups over the registry (models/registry.cc); nullptr when unknown.
const Architecture* FindArchitectureByGguf(std::string_view name);
const Architecture* FindArchitectureByHf(std::string_view hf_class, std::string_view model_type);
std::string KnownArchitectures();

}  // namespace petrel
