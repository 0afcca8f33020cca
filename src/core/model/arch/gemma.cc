// The Gemma 2 and Gemma 3 (text) families: embeddings scaled by sqrt(D), four RMS norms per
// block (pre- and post-attention, pre- and post-FFN) whose HF weights w act as 1 + w (the GGUF
// stores 1 + w), GeGLU with tanh GELU, and windowed layers interleaved with global ones.
// Gemma 2 soft-caps the attention scores (c·tanh(s/c), before the mask) and the final logits;
// Gemma 3 instead norms q and k per head and gives its windowed layers their own RoPE base
// (the linear scaling applies to the global layers only). Pairs rotate half-split.
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/model/arch/decoder_graph.h"
#include "core/model/arch/decoder_weights.h"
#include "core/model/arch/llama.h"

namespace petrel {
namespace {

using namespace decoder_weights;

enum GemmaWeight : size_t {
  kAttnNorm,
  kWq,
  kWk,
  kWv,
  kWo,
  kQNorm,
  kKNorm,
  kAttnPostNorm,
  kFfnNorm,
  kWGate,
  kWUp,
  kWDown,
  kFfnPostNorm,
  kGemmaWeightCount
};

bool QkNorm(Config c) { return c.qk_norm; }

// A norm weight: HF stores w, applied as 1 + w.
constexpr WeightSpec Norm(const char* gguf_name, const char* hf_name,
                          WeightShape (*shape)(Config) = &Dim, bool (*required)(Config) = nullptr) {
  return {gguf_name, hf_name, WeightKind::kVector, shape, required, false, 1.0f, -1, nullptr};
}

constexpr std::array<WeightSpec, kGemmaWeightCount> GemmaLayerWeights() {
  std::array<WeightSpec, kGemmaWeightCount> w{};
  w[kAttnNorm] = Norm("attn_norm.weight", "input_layernorm.weight");
  w[kWq] = {"attn_q.weight", "self_attn.q_proj.weight", kMatrix, &DimToQ, nullptr, true};
  w[kWk] = {"attn_k.weight", "self_attn.k_proj.weight", kMatrix, &DimToKv, nullptr, true};
  w[kWv] = {"attn_v.weight", "self_attn.v_proj.weight", kMatrix, &DimToKv};
  w[kWo] = {"attn_output.weight", "self_attn.o_proj.weight", kMatrix, &QToDim};
  w[kQNorm] = Norm("attn_q_norm.weight", "self_attn.q_norm.weight", &HeadDim, &QkNorm);
  w[kKNorm] = Norm("attn_k_norm.weight", "self_attn.k_norm.weight", &HeadDim, &QkNorm);
  w[kAttnPostNorm] = Norm("post_attention_norm.weight", "post_attention_layernorm.weight");
  w[kFfnNorm] = Norm("ffn_norm.weight", "pre_feedforward_layernorm.weight");
  w[kWGate] = {"ffn_gate.weight", "mlp.gate_proj.weight", kMatrix, &DimToFfn};
  w[kWUp] = {"ffn_up.weight", "mlp.up_proj.weight", kMatrix, &DimToFfn};
  w[kWDown] = {"ffn_down.weight", "mlp.down_proj.weight", kMatrix, &FfnToDim};
  w[kFfnPostNorm] = Norm("post_ffw_norm.weight", "post_feedforward_layernorm.weight");
  return w;
}

constexpr std::array<WeightSpec, kGemmaWeightCount> kGemmaLayerWeights = GemmaLayerWeights();
static_assert(AllSpecsSet(kGemmaLayerWeights), "every GemmaWeight needs its row");

std::string Key(const Architecture& arch, const char* suffix) {
  return std::string(arch.gguf_name) + "." + suffix;
}

// Gemma 2 slides on even layers; Gemma 3 on all but every `period`-th.
std::vector<uint8_t> EvenLayersSlide(int64_t n_layers) {
  std::vector<uint8_t> layers(static_cast<size_t>(n_layers));
  for (size_t l = 0; l < layers.size(); ++l) layers[l] = l % 2 == 0;
  return layers;
}

std::vector<uint8_t> AllButEveryNthSlide(int64_t n_layers, uint64_t period) {
  std::vector<uint8_t> layers(static_cast<size_t>(n_layers));
  for (size_t l = 0; l < layers.size(); ++l) layers[l] = (l + 1) % period != 0;
  return layers;
}

// What both Gemmas share, after Llama's keys are read.
void SetGemmaCommon(ModelConfig& c) {
  // HF multiplies by sqrt(D) cast to the model's dtype: exact for F32 checkpoints.
  c.embedding_scale = std::sqrt(float(c.dim));
}

// The GGUF keys: Llama's, plus the window (present in every Gemma GGUF; llama.cpp's default
// otherwise), the soft-caps, and Gemma 3's local RoPE base and window pattern.
Result<ModelConfig> GemmaConfigFromGguf(const GgufFile& file, const Architecture& arch,
                                        bool gemma3) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromGguf(file, arch));
  SetGemmaCommon(c);
  if (!file.Find(Key(arch, "attention.sliding_window"))) c.sliding_window = 4096;
  // The GGUF has no query_pre_attn_scalar. llama.cpp scales by head_dim^-0.5, except for the
  // 27B models (46 blocks for Gemma 2, 62 for Gemma 3), whose HF configs set it to D / heads;
  // an explicit `attention.scale` key (written by petrel) wins.
  const bool is_27b = c.n_layers == (gemma3 ? 62 : 46);
  const double default_scale =
      is_27b && c.n_heads > 0 ? 1.0 / std::sqrt(double(c.dim) / double(c.n_heads)) : 0.0;
  PETREL_ASSIGN_OR_RETURN(double scale, file.GetFloatOr(Key(arch, "attention.scale"), default_scale));
  c.attention_scale = float(scale);
  PETREL_ASSIGN_OR_RETURN(double attn_cap,
                          file.GetFloatOr(Key(arch, "attn_logit_softcapping"), gemma3 ? 0.0 : 50.0));
  PETREL_ASSIGN_OR_RETURN(double final_cap,
                          file.GetFloatOr(Key(arch, "final_logit_softcapping"), gemma3 ? 0.0 : 30.0));
  c.attn_softcap = float(attn_cap);
  c.final_softcap = float(final_cap);
  if (!gemma3) {
    c.sliding_layers = EvenLayersSlide(c.n_layers);
    return c;
  }
  c.qk_norm = true;
  PETREL_ASSIGN_OR_RETURN(double local_base, file.GetFloatOr(Key(arch, "rope.freq_base_swa"), 10000.0));
  c.rope_local_base = float(local_base);
  if (!(c.rope_local_base > 0.0f)) {
    return Error("key %s: local rope base %g must be positive",
                 Key(arch, "rope.freq_base_swa").c_str(), local_base);
  }
  PETREL_ASSIGN_OR_RETURN(uint64_t period,
                          file.GetUintOr(Key(arch, "attention.sliding_window_pattern"), 6));
  if (period == 0) {
    return Error("key %s: sliding-window pattern 0 is invalid",
                 Key(arch, "attention.sliding_window_pattern").c_str());
  }
  c.sliding_layers = AllButEveryNthSlide(c.n_layers, period);
  return c;
}

Result<ModelConfig> Gemma2ConfigFromGguf(const GgufFile& file, const Architecture& arch) {
  return GemmaConfigFromGguf(file, arch, /*gemma3=*/false);
}
Result<ModelConfig> Gemma3ConfigFromGguf(const GgufFile& file, const Architecture& arch) {
  return GemmaConfigFromGguf(file, arch, /*gemma3=*/true);
}

// A number field that may be absent or null (then `fallback`).
Result<double> NumberOr(const nlohmann::json& json, const char* field, double fallback) {
  auto it = json.find(field);
  if (it == json.end() || it->is_null()) return fallback;
  if (!it->is_number()) return Error("config.json: field '%s' must be a number", field);
  return it->get<double>();
}

// A soft-cap field: absent or null is no cap (0); a given cap must be positive, since
// transformers divides by it (0 would turn every score into NaN).
Result<double> SoftcapOr(const nlohmann::json& json, const char* field, const char* what) {
  PETREL_ASSIGN_OR_RETURN(double cap, NumberOr(json, field, 0.0));
  if (json.contains(field) && !json[field].is_null() && !(cap > 0.0 && std::isfinite(cap))) {
    return Error(
        "config.json: field '%s': %s soft-cap %g is invalid (must be positive, or null "
        "for none)",
        field, what, cap);
  }
  return cap;
}

Result<ModelConfig> GemmaConfigFromHf(const nlohmann::json& json, const Architecture& arch,
                                      bool gemma3) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromHf(json, arch));
  SetGemmaCommon(c);
  c.tied_embeddings = json.value("tie_word_embeddings", true);  // Gemma's default
  if (auto it = json.find("sliding_window"); it == json.end()) {
    c.sliding_window = 4096;
  } else if (!it->is_number_integer()) {
    return Error("config.json: field 'sliding_window' must be an integer");
  }
  PETREL_ASSIGN_OR_RETURN(double query_scalar,
                          NumberOr(json, "query_pre_attn_scalar", double(c.head_dim)));
  if (!(query_scalar > 0.0)) {
    return Error("config.json: field 'query_pre_attn_scalar' must be positive, not %g",
                 query_scalar);
  }
  c.attention_scale = float(1.0 / std::sqrt(query_scalar));
  PETREL_ASSIGN_OR_RETURN(double attn_cap,
                          SoftcapOr(json, "attn_logit_softcapping", "attention-logit"));
  PETREL_ASSIGN_OR_RETURN(double final_cap,
                          SoftcapOr(json, "final_logit_softcapping", "final-logit"));
  c.attn_softcap = float(attn_cap);
  c.final_softcap = float(final_cap);
  if (gemma3) {
    c.qk_norm = true;
    PETREL_ASSIGN_OR_RETURN(double theta, NumberOr(json, "rope_theta", 1e6));
    PETREL_ASSIGN_OR_RETURN(double local, NumberOr(json, "rope_local_base_freq", 10000.0));
    c.rope.base = float(theta);
    c.rope_local_base = float(local);
    if (!(c.rope_local_base > 0.0f)) {
      return Error("config.json: field 'rope_local_base_freq' must be positive, not %g", local);
    }
  }
  // Which layers slide: `layer_types` when given, else the family's fixed pattern.
  if (auto it = json.find("layer_types"); it != json.end() && !it->is_null()) {
    if (!it->is_array() || int64_t(it->size()) != c.n_layers) {
      return Error("config.json: field 'layer_types' must list one type per layer (%lld)",
                   (long long)c.n_layers);
    }
    for (const nlohmann::json& type : *it) {
      const std::string name = type.is_string() ? type.get<std::string>() : "";
      if (name != "sliding_attention" && name != "full_attention") {
        return Error("config.json: layer type '%s' is not supported", type.dump().c_str());
      }
      c.sliding_layers.push_back(name == "sliding_attention");
    }
  } else if (gemma3) {
    PETREL_ASSIGN_OR_RETURN(double period, NumberOr(json, "sliding_window_pattern", 6));
    if (!(period >= 1.0) || period != std::floor(period)) {
      return Error("config.json: field 'sliding_window_pattern' must be a positive integer");
    }
    c.sliding_layers = AllButEveryNthSlide(c.n_layers, uint64_t(period));
  } else {
    c.sliding_layers = EvenLayersSlide(c.n_layers);
  }
  return c;
}

Result<ModelConfig> Gemma2ConfigFromHf(const nlohmann::json& json, const Architecture& arch) {
  return GemmaConfigFromHf(json, arch, /*gemma3=*/false);
}
Result<ModelConfig> Gemma3ConfigFromHf(const nlohmann::json& json, const Architecture& arch) {
  return GemmaConfigFromHf(json, arch, /*gemma3=*/true);
}

// The keys GemmaConfigFromGguf reads back.
void GemmaConfigToGguf(const ModelConfig& c, const Architecture& arch, GgufWriter* writer) {
  LlamaConfigToGguf(c, arch, writer);
  const std::string a = arch.gguf_name;
  writer->SetF32(a + ".attn_logit_softcapping", c.attn_softcap);
  writer->SetF32(a + ".final_logit_softcapping", c.final_softcap);
  // The scale from query_pre_attn_scalar, explicitly: the reader's default depends on the size.
  if (c.attention_scale > 0.0f) writer->SetF32(a + ".attention.scale", c.attention_scale);
  if (c.rope_local_base > 0.0f) writer->SetF32(a + ".rope.freq_base_swa", c.rope_local_base);
  // Gemma 3's pattern as a period (the first global layer's index + 1), when it is one.
  if (c.rope_local_base > 0.0f && !c.sliding_layers.empty()) {
    uint64_t period = c.sliding_layers.size();
    for (size_t l = 0; l < c.sliding_layers.size(); ++l) {
      if (!c.sliding_layers[l]) {
        period = l + 1;
        break;
      }
    }
    if (AllButEveryNthSlide(c.n_layers, period) == c.sliding_layers) {
      writer->SetU32(a + ".attention.sliding_window_pattern", uint32_t(period));
    }
  }
}

BlockViews GemmaBlockViews(const LayerWeights& L) {
  BlockViews b;
  b.attn_norm = &L[kAttnNorm];
  b.wq = &L[kWq];
  b.wk = &L[kWk];
  b.wv = &L[kWv];
  b.wo = &L[kWo];
  b.q_norm = &L[kQNorm];
  b.k_norm = &L[kKNorm];
  b.attn_post_norm = &L[kAttnPostNorm];
  b.ffn_norm = &L[kFfnNorm];
  b.ffn_gate = &L[kWGate];
  b.ffn_up = &L[kWUp];
  b.ffn_down = &L[kWDown];
  b.ffn_post_norm = &L[kFfnPostNorm];
  return b;
}

void BuildGemmaGraph(const ModelConfig& c, const ModelWeights& w, size_t n_tokens,
                     size_t n_selected, Graph* g) {
  BuildDecoderGraph({&GemmaBlockViews, FfnActivation::kGeluTanh}, c, w, n_tokens, n_selected, g);
}

}  // namespace

#define PETREL_GEMMA_FAMILY(config_from_gguf, config_from_hf)                                   \
  {                                                                                             \
    "model.layers.", kGemmaLayerWeights,                                                        \
        {"token_embd.weight", "model.embed_tokens.weight", kMatrix, &DimToVocab},               \
        Norm("output_norm.weight", "model.norm.weight"),                                        \
        {"output.weight", "lm_head.weight", kMatrix, &DimToVocab, &Untied}, &config_from_gguf, \
        &config_from_hf, &GemmaConfigToGguf, &BuildGemmaGraph,                                  \
  }

extern constinit const ArchitectureFamily kGemma2Family =
    PETREL_GEMMA_FAMILY(Gemma2ConfigFromGguf, Gemma2ConfigFromHf);
extern constinit const ArchitectureFamily kGemma3Family =
    PETREL_GEMMA_FAMILY(Gemma3ConfigFromGguf, Gemma3ConfigFromHf);

#undef PETREL_GEMMA_FAMILY

}  // namespace petrel
