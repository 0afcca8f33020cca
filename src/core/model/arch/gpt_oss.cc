// The gpt-oss family (GGUF arch `gpt-oss`, HF `GptOssForCausalLM`): a mixture of experts in
// every block, with
//   - attention sinks: one learned logit per head that joins the softmax's denominator;
//   - windowed layers alternating with global ones (even layers slide; HF `layer_types`);
//   - q/k/v/o projections with biases, half-split RoPE with YaRN scaling whose ramp is NOT
//     rounded (the real configs have `rope_scaling.truncate: false`; llama.cpp rounds anyway);
//   - a router with a bias; each token's top-k logits, softmaxed over those k only;
//   - experts with biases and a clamped SwiGLU, out = (clamp(u, -L, L) + 1) · g' · σ(1.702 g'),
//     g' = min(g, L), L = `swiglu_limit` (7).
// HF folders store the experts fused: `mlp.experts.gate_up_proj` [E][D][2F] with gate and up
// interleaved on the last axis, `down_proj` [E][F][D] (input-major), their biases [E][2F] and
// [E][D]; they are gathered into the GGUF layout at load (WeightSpec::hf_stride).
#include <array>
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

enum GptOssWeight : size_t {
  kAttnNorm,
  kWq,
  kBq,
  kWk,
  kBk,
  kWv,
  kBv,
  kWo,
  kBo,
  kSinks,
  kFfnNorm,
  kRouter,
  kRouterBias,
  kGateExps,
  kUpExps,
  kDownExps,
  kGateExpsBias,
  kUpExpsBias,
  kDownExpsBias,
  kGptOssWeightCount
};

WeightShape Heads(Config c) { return {c.n_heads, 1}; }
WeightShape Experts(Config c) { return {c.n_experts, 1}; }
WeightShape ExpertFfnRows(Config c) { return {c.expert_ffn_dim, c.n_experts}; }  // biases
WeightShape ExpertDimRows(Config c) { return {c.dim, c.n_experts}; }

// A weight whose HF tensor is another layout: every `stride`-th feature from `first`, and/or
// matrices stored input-major.
constexpr WeightSpec Gathered(const char* gguf_name, const char* hf_name, WeightKind kind,
                              WeightShape (*shape)(Config), int stride, int first,
                              bool input_major) {
  WeightSpec spec{gguf_name, hf_name, kind, shape};
  spec.hf_stride = stride;
  spec.hf_first = first;
  spec.hf_input_major = input_major;
  return spec;
}

constexpr std::array<WeightSpec, kGptOssWeightCount> GptOssLayerWeights() {
  std::array<WeightSpec, kGptOssWeightCount> w{};
  w[kAttnNorm] = {"attn_norm.weight", "input_layernorm.weight", kVector, &Dim};
  w[kWq] = {"attn_q.weight", "self_attn.q_proj.weight", kMatrix, &DimToQ, nullptr, true};
  w[kBq] = {"attn_q.bias", "self_attn.q_proj.bias", kVector, &QDim, nullptr, true};
  w[kWk] = {"attn_k.weight", "self_attn.k_proj.weight", kMatrix, &DimToKv, nullptr, true};
  w[kBk] = {"attn_k.bias", "self_attn.k_proj.bias", kVector, &KvDim, nullptr, true};
  w[kWv] = {"attn_v.weight", "self_attn.v_proj.weight", kMatrix, &DimToKv};
  w[kBv] = {"attn_v.bias", "self_attn.v_proj.bias", kVector, &KvDim};
  w[kWo] = {"attn_output.weight", "self_attn.o_proj.weight", kMatrix, &QToDim};
  w[kBo] = {"attn_output.bias", "self_attn.o_proj.bias", kVector, &Dim};
  w[kSinks] = {"attn_sinks.weight", "self_attn.sinks", kVector, &Heads};
  // HF's `post_attention_layernorm` is the pre-FFN norm; llama.cpp keeps the HF name.
  w[kFfnNorm] = {"post_attention_norm.weight", "post_attention_layernorm.weight", kVector, &Dim};
  w[kRouter] = {"ffn_gate_inp.weight", "mlp.router.weight", kMatrix, &DimToExperts};
  w[kRouterBias] = {"ffn_gate_inp.bias", "mlp.router.bias", kVector, &Experts};
  w[kGateExps] = Gathered("ffn_gate_exps.weight", "mlp.experts.gate_up_proj", kExperts,
                          &DimToExpertFfn, 2, 0, true);
  w[kUpExps] = Gathered("ffn_up_exps.weight", "mlp.experts.gate_up_proj", kExperts, &DimToExpertFfn,
                        2, 1, true);
  w[kDownExps] = Gathered("ffn_down_exps.weight", "mlp.experts.down_proj", kExperts,
                          &ExpertFfnToDim, 1, 0, true);
  w[kGateExpsBias] = Gathered("ffn_gate_exps.bias", "mlp.experts.gate_up_proj_bias", kVector,
                              &ExpertFfnRows, 2, 0, false);
  w[kUpExpsBias] = Gathered("ffn_up_exps.bias", "mlp.experts.gate_up_proj_bias", kVector,
                            &ExpertFfnRows, 2, 1, false);
  w[kDownExpsBias] = {"ffn_down_exps.bias", "mlp.experts.down_proj_bias", kVector, &ExpertDimRows};
  return w;
}

constexpr std::array<WeightSpec, kGptOssWeightCount> kGptOssLayerWeights = GptOssLayerWeights();
static_assert(AllSpecsSet(kGptOssLayerWeights), "every GptOssWeight needs its row");

std::string Key(const Architecture& arch, const char* suffix) {
  return std::string(arch.gguf_name) + "." + suffix;
}

// The clamped SwiGLU's constants: alpha is fixed in every implementation; the limit is HF's
// `swiglu_limit` (llama.cpp hard-codes 7, the GGUF has no key; petrel writes its own).
constexpr float kSwigluAlpha = 1.702f;
constexpr double kDefaultSwigluLimit = 7.0;

// What both sources share once the Llama-style keys are read.
Status SetGptOssCommon(ModelConfig& c, double swiglu_limit, const char* limit_where) {
  if (c.n_experts <= 0) return Error("gpt-oss needs experts (the expert count is missing or 0)");
  if (!(swiglu_limit > 0.0) || !std::isfinite(swiglu_limit)) {
    return Error("%s: swiglu limit %g must be positive", limit_where, swiglu_limit);
  }
  c.expert_weights_norm = true;  // softmax over the chosen logits
  c.expert_glu_alpha = kSwigluAlpha;
  c.expert_glu_limit = float(swiglu_limit);
  c.expert_glu_up_offset = 1.0f;
  return Status::Ok();
}

// Even layers slide (llama.cpp's period 2 starting with a windowed layer; HF's default).
std::vector<uint8_t> EvenLayersSlide(int64_t n_layers) {
  std::vector<uint8_t> layers(size_t(n_layers > 0 ? n_layers : 0));
  for (size_t l = 0; l < layers.size(); ++l) layers[l] = l % 2 == 0;
  return layers;
}

Result<ModelConfig> GptOssConfigFromGguf(const GgufFile& file, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromGguf(file, arch));
  // gpt-oss's YaRN does not round its ramp (see the file comment), unless the file says so.
  if (c.rope.scaling == RopeScalingKind::kYarn) {
    PETREL_ASSIGN_OR_RETURN(c.rope.yarn_truncate,
                            file.GetBoolOr(Key(arch, "rope.scaling.yarn_truncate"), false));
  }
  c.sliding_layers = EvenLayersSlide(c.n_layers);
  PETREL_ASSIGN_OR_RETURN(double limit,
                          file.GetFloatOr(Key(arch, "expert_swiglu_limit"), kDefaultSwigluLimit));
  PETREL_RETURN_IF_ERROR(
      SetGptOssCommon(c, limit, ("key " + Key(arch, "expert_swiglu_limit")).c_str()));
  return c;
}

Result<ModelConfig> GptOssConfigFromHf(const nlohmann::json& json, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromHf(json, arch));
  c.qkv_bias = true;
  if (auto it = json.find("sliding_window");
      it != json.end() && !it->is_null() && !it->is_number_integer()) {
    return Error("config.json: field 'sliding_window' must be an integer");
  }
  // Which layers slide: `layer_types` when given, else the even ones.
  if (auto it = json.find("layer_types"); it != json.end() && !it->is_null()) {
    if (!it->is_array() || int64_t(it->size()) != c.n_layers) {
      return Error("config.json: field 'layer_types' must list one type per layer (%lld)",
                   (long long)c.n_layers);
    }
    for (const nlohmann::json& type : *it) {
      const std::string name = type.is_string() ? type.get<std::string>() : "";
      if (name != "sliding_attention" && name != "full_attention") {
        return Error("config.json: layer type %s is not supported", type.dump().c_str());
      }
      c.sliding_layers.push_back(name == "sliding_attention");
    }
  } else {
    c.sliding_layers = EvenLayersSlide(c.n_layers);
  }
  double limit = kDefaultSwigluLimit;
  if (auto it = json.find("swiglu_limit"); it != json.end() && !it->is_null()) {
    if (!it->is_number()) return Error("config.json: field 'swiglu_limit' must be a number");
    limit = it->get<double>();
  }
  PETREL_RETURN_IF_ERROR(SetGptOssCommon(c, limit, "config.json: field 'swiglu_limit'"));
  return c;
}

// The keys GptOssConfigFromGguf reads back: Llama's (window, YaRN, experts) and the limit.
// The GGUF cannot say which layers slide: the even ones, as llama.cpp assumes.
void GptOssConfigToGguf(const ModelConfig& c, const Architecture& arch, GgufWriter* writer) {
  LlamaConfigToGguf(c, arch, writer);
  writer->SetF32(Key(arch, "expert_swiglu_limit"), c.expert_glu_limit);
  if (c.rope.scaling == RopeScalingKind::kYarn) {
    writer->SetBool(Key(arch, "rope.scaling.yarn_truncate"), c.rope.yarn_truncate);
  }
}

BlockViews GptOssBlockViews(const LayerWeights& L) {
  BlockViews b;
  b.attn_norm = &L[kAttnNorm];
  b.wq = &L[kWq];
  b.wk = &L[kWk];
  b.wv = &L[kWv];
  b.wo = &L[kWo];
  b.bq = &L[kBq];
  b.bk = &L[kBk];
  b.bv = &L[kBv];
  b.bo = &L[kBo];
  b.attn_sinks = &L[kSinks];
  b.ffn_norm = &L[kFfnNorm];
  b.ffn_router = &L[kRouter];
  b.ffn_router_bias = &L[kRouterBias];
  b.ffn_gate_exps = &L[kGateExps];
  b.ffn_up_exps = &L[kUpExps];
  b.ffn_down_exps = &L[kDownExps];
  b.ffn_gate_exps_bias = &L[kGateExpsBias];
  b.ffn_up_exps_bias = &L[kUpExpsBias];
  b.ffn_down_exps_bias = &L[kDownExpsBias];
  return b;
}

void BuildGptOssGraph(const ModelConfig& c, const ModelWeights& w, size_t n_tokens,
                      size_t n_selected, Graph* g) {
  BuildDecoderGraph({&GptOssBlockViews, FfnActivation::kSilu}, c, w, n_tokens, n_selected, g);
}

}  // namespace

extern constinit const ArchitectureFamily kGptOssFamily = {
    "model.layers.",
    kGptOssLayerWeights,
    decoder_weights::kTokenEmbd,
    decoder_weights::kOutputNorm,
    decoder_weights::kOutput,
    &GptOssConfigFromGguf,
    &GptOssConfigFromHf,
    &GptOssConfigToGguf,
    &BuildGptOssGraph,
};

}  // namespace petrel
