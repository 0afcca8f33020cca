// The Llama family: reads and writes hyperparameters, declares its weights, builds the graph.
// The forward pass, per block: x += Wo·Attn(RoPE(Wq·n1), RoPE(Wk·n1), Wv·n1);
// x += Wdown·(silu(Wgate·n2) ⊙ Wup·n2), with n1, n2 the RMS-normed x (decoder_graph.h).
#include "core/model/arch/llama.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/model/arch/config_fields.h"
#include "core/model/arch/decoder_graph.h"
#include "core/model/arch/decoder_weights.h"
#include "core/model/arch/rope_scaling.h"

namespace petrel {
namespace {

using namespace decoder_weights;
using namespace llama_block;

std::string Key(const Architecture& arch, const char* suffix) {
  return std::string(arch.gguf_name) + "." + suffix;
}

}  // namespace

Result<ModelConfig> LlamaConfigFromGguf(const GgufFile& file, const Architecture& arch) {
  ModelConfig c;
  c.architecture = arch.gguf_name;
  PETREL_ASSIGN_OR_RETURN(uint64_t dim, file.GetUint(Key(arch, "embedding_length")));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_layers, file.GetUint(Key(arch, "block_count")));
  PETREL_ASSIGN_OR_RETURN(uint64_t ffn, file.GetUint(Key(arch, "feed_forward_length")));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_heads, file.GetUint(Key(arch, "attention.head_count")));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_kv, file.GetUintOr(Key(arch, "attention.head_count_kv"), n_heads));
  PETREL_ASSIGN_OR_RETURN(uint64_t ctx, file.GetUintOr(Key(arch, "context_length"), 2048));
  PETREL_ASSIGN_OR_RETURN(double eps, file.GetFloatOr(Key(arch, "attention.layer_norm_rms_epsilon"), 1e-5));
  PETREL_ASSIGN_OR_RETURN(double base, file.GetFloatOr(Key(arch, "rope.freq_base"), 10000.0));
  // Clamp before narrowing so absurd values fail Validate() instead of wrapping.
  auto clamp = [](uint64_t v) { return int64_t(v > (uint64_t(1) << 40) ? (uint64_t(1) << 40) : v); };
  c.dim = clamp(dim);
  c.n_layers = clamp(n_layers);
  PETREL_RETURN_IF_ERROR(CheckBlockCount(c.n_layers, "key " + Key(arch, "block_count")));
  c.ffn_dim = clamp(ffn);
  c.n_heads = clamp(n_heads);
  c.n_kv_heads = clamp(n_kv);
  c.max_context = clamp(ctx);
  c.norm_eps = float(eps);
  c.head_dim = c.n_heads > 0 ? c.dim / c.n_heads : 0;
  PETREL_ASSIGN_OR_RETURN(uint64_t key_length, file.GetUintOr(Key(arch, "attention.key_length"), uint64_t(c.head_dim)));
  c.head_dim = clamp(key_length);
  PETREL_ASSIGN_OR_RETURN(uint64_t value_length, file.GetUintOr(Key(arch, "attention.value_length"), key_length));
  if (value_length != key_length) {
    return Error("key %s: value heads of %llu differ from key heads of %llu (not supported)",
                 Key(arch, "attention.value_length").c_str(), (unsigned long long)value_length,
                 (unsigned long long)key_length);
  }
  PETREL_ASSIGN_OR_RETURN(uint64_t rope_dims, file.GetUintOr(Key(arch, "rope.dimension_count"), uint64_t(c.head_dim)));
  c.rope.dims = clamp(rope_dims);
  c.rope.base = float(base);
  c.rope.style = arch.gguf_rope_style;
  PETREL_ASSIGN_OR_RETURN(std::string_view scaling, file.GetStringOr(Key(arch, "rope.scaling.type"), "none"));
  PETREL_ASSIGN_OR_RETURN(double factor, file.GetFloatOr(Key(arch, "rope.scaling.factor"), 1.0));
  if (scaling == "linear" && factor != 1.0) {
    c.rope.scaling = RopeScalingKind::kLinear;
    c.rope.factor = float(factor);
  } else if (scaling == "yarn") {
    // llama.cpp rounds YaRN's ramp for every family; a family that does not (gpt-oss) says so.
    PETREL_RETURN_IF_ERROR(
        ReadGgufYarn(file, arch, factor, c.max_context, /*truncate=*/true, &c.rope));
  } else if (scaling != "none" && scaling != "linear") {
    return Error("key %s: rope scaling '%.*s' is not supported", Key(arch, "rope.scaling.type").c_str(),
                 int(scaling.size()), scaling.data());
  }
  PETREL_ASSIGN_OR_RETURN(uint64_t window, file.GetUintOr(Key(arch, "attention.sliding_window"), 0));
  c.sliding_window = clamp(window);
  // Llama 3 scaling is stored as per-pair divisors in the `rope_freqs.weight` tensor.
  if (const GgufTensorInfo* freqs = file.FindTensor("rope_freqs.weight")) {
    if (freqs->desc.dtype != DType::kF32 || freqs->desc.ne[0] != c.rope.dims / 2) {
      return Error("tensor rope_freqs.weight: expected F32 [%lld], found %s %s",
                   (long long)(c.rope.dims / 2), DTypeName(freqs->desc.dtype),
                   freqs->desc.ShapeString().c_str());
    }
    const float* values = static_cast<const float*>(freqs->data);
    c.rope.freq_factors.assign(values, values + freqs->desc.ne[0]);
  }
  // LongRoPE (Phi-3's long-context models) is stored as two tables of per-pair divisors.
  PETREL_RETURN_IF_ERROR(ReadGgufLongRope(file, arch, c.max_context, &c.rope));
  c.qkv_bias = arch.qkv_bias;
  // The vocabulary size comes from the token list; the weights are checked against it later.
  if (const GgufValue* tokens = file.Find("tokenizer.ggml.tokens")) {
    c.n_vocab = clamp(tokens->count);
  } else if (const GgufTensorInfo* embd = file.FindTensor(arch.token_embd.gguf_name)) {
    c.n_vocab = embd->desc.ne[1];
  }
  c.tied_embeddings = file.FindTensor(arch.output.gguf_name) == nullptr;
  PETREL_RETURN_IF_ERROR(ReadGgufExperts(file, arch, c.ffn_dim, &c));
  return c;
}

Status ReadGgufExperts(const GgufFile& file, const Architecture& arch, int64_t default_ffn,
                       ModelConfig* c) {
  PETREL_ASSIGN_OR_RETURN(uint64_t n_experts, file.GetUintOr(Key(arch, "expert_count"), 0));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_used, file.GetUintOr(Key(arch, "expert_used_count"), 0));
  PETREL_ASSIGN_OR_RETURN(uint64_t expert_ffn,
                          file.GetUintOr(Key(arch, "expert_feed_forward_length"),
                                         uint64_t(std::max<int64_t>(default_ffn, 0))));
  // Mixtral and Qwen3-MoE renormalise the chosen experts' weights; llama.cpp's key says so for
  // the families where it varies.
  PETREL_ASSIGN_OR_RETURN(bool norm, file.GetBoolOr(Key(arch, "expert_weights_norm"), true));
  auto clamp = [](uint64_t v) { return int64_t(v > (uint64_t(1) << 40) ? (uint64_t(1) << 40) : v); };
  // A file with stacked expert tensors but no expert count would be read as a dense model and
  // fail later on a missing tensor; name the key instead.
  if (n_experts == 0) {
    for (const WeightSpec& spec : arch.layer_weights) {
      if (spec.kind == WeightKind::kExperts && file.FindTensor(GgufWeightName(spec, 0))) {
        return Error("key %s is missing or 0 but the file has expert tensors (%s)",
                     Key(arch, "expert_count").c_str(), GgufWeightName(spec, 0).c_str());
      }
    }
  }
  c->n_experts = clamp(n_experts);
  c->n_experts_used = clamp(n_used);
  c->expert_ffn_dim = clamp(expert_ffn);
  c->expert_weights_norm = norm;
  return Status::Ok();
}

Status ReadHfExperts(const nlohmann::json& json, const char* count_field, const char* ffn_field,
                     const char* norm_field, bool default_norm, ModelConfig* c) {
  c->n_experts = 0;
  if (json.contains(count_field) && !json[count_field].is_null()) {
    PETREL_ASSIGN_OR_RETURN(c->n_experts, JsonInt(json, count_field));
    // A count given is a mixture of experts; 0 would silently read it as a dense model.
    if (c->n_experts <= 0) {
      return Error("config.json: %s is %s: a mixture of experts needs at least one expert",
                   count_field,
                   c->n_experts == 0 ? "missing or 0" : std::to_string(c->n_experts).c_str());
    }
  }
  if (json.contains("num_experts_per_tok") && !json["num_experts_per_tok"].is_null()) {
    PETREL_ASSIGN_OR_RETURN(c->n_experts_used, JsonInt(json, "num_experts_per_tok"));
  }
  c->expert_ffn_dim = c->ffn_dim;
  if (ffn_field && json.contains(ffn_field) && !json[ffn_field].is_null()) {
    PETREL_ASSIGN_OR_RETURN(c->expert_ffn_dim, JsonInt(json, ffn_field));
  }
  c->expert_weights_norm = default_norm;
  if (norm_field && json.contains(norm_field)) {
    if (!json[norm_field].is_boolean()) {
      return Error("config.json: field '%s' must be true or false", norm_field);
    }
    c->expert_weights_norm = json[norm_field].get<bool>();
  }
  return Status::Ok();
}

Result<ModelConfig> LlamaConfigFromHf(const nlohmann::json& json, const Architecture& arch) {
  ModelConfig c;
  c.architecture = arch.gguf_name;
  PETREL_ASSIGN_OR_RETURN(c.dim, JsonInt(json, "hidden_size"));
  PETREL_ASSIGN_OR_RETURN(c.n_layers, JsonInt(json, "num_hidden_layers"));
  PETREL_RETURN_IF_ERROR(CheckBlockCount(c.n_layers, "config.json: field 'num_hidden_layers'"));
  PETREL_ASSIGN_OR_RETURN(c.ffn_dim, JsonInt(json, "intermediate_size"));
  PETREL_ASSIGN_OR_RETURN(c.n_heads, JsonInt(json, "num_attention_heads"));
  PETREL_ASSIGN_OR_RETURN(c.n_vocab, JsonInt(json, "vocab_size"));
  c.n_kv_heads = c.n_heads;
  if (json.contains("num_key_value_heads") && !json["num_key_value_heads"].is_null()) {
    PETREL_ASSIGN_OR_RETURN(c.n_kv_heads, JsonInt(json, "num_key_value_heads"));
  }
  c.head_dim = c.n_heads > 0 ? c.dim / c.n_heads : 0;
  if (json.contains("head_dim") && !json["head_dim"].is_null()) {
    PETREL_ASSIGN_OR_RETURN(c.head_dim, JsonInt(json, "head_dim"));
  }
  c.max_context = 2048;
  if (json.contains("max_position_embeddings")) {
    PETREL_ASSIGN_OR_RETURN(c.max_context, JsonInt(json, "max_position_embeddings"));
  }
  PETREL_ASSIGN_OR_RETURN(double eps, JsonNumberOr(json, "rms_norm_eps", 1e-6));
  PETREL_ASSIGN_OR_RETURN(double theta, JsonNumberOr(json, "rope_theta", 10000.0));
  c.norm_eps = float(eps);
  c.rope.base = float(theta);
  c.rope.dims = c.head_dim;
  c.rope.style = RopeStyle::kHalfSplit;  // HF checkpoints rotate the two halves of each head
  if (json.contains("sliding_window") && json["sliding_window"].is_number_integer()) {
    c.sliding_window = json["sliding_window"].get<int64_t>();
  }
  if (auto it = json.find("rope_scaling"); it != json.end() && it->is_object()) {
    const nlohmann::json& s = *it;
    std::string type = s.value("rope_type", s.value("type", std::string("default")));
    PETREL_ASSIGN_OR_RETURN(double factor, JsonNumberOr(s, "factor", 1.0));
    c.rope.factor = float(factor);
    if (type == "linear") {
      c.rope.scaling = RopeScalingKind::kLinear;
    } else if (type == "llama3") {
      c.rope.scaling = RopeScalingKind::kLlama3;
      PETREL_ASSIGN_OR_RETURN(double low, JsonNumberOr(s, "low_freq_factor", 1.0));
      PETREL_ASSIGN_OR_RETURN(double high, JsonNumberOr(s, "high_freq_factor", 4.0));
      PETREL_ASSIGN_OR_RETURN(double original, JsonNumberOr(s, "original_max_position_embeddings", 8192));
      c.rope.low_freq_factor = float(low);
      c.rope.high_freq_factor = float(high);
      c.rope.original_context = int64_t(original);
    } else if (type == "yarn") {
      PETREL_RETURN_IF_ERROR(ReadHfYarn(s, c.max_context, &c.rope));
    } else if (type == "longrope" || type == "su") {  // "su": Phi-3's first name for it
      PETREL_RETURN_IF_ERROR(ReadHfLongRope(json, s, c.max_context, &c.rope));
    } else if (type != "default") {
      return Error("config.json: rope_scaling type '%s' is not supported", type.c_str());
    }
  } else if (it != json.end() && !it->is_null()) {
    return Error("config.json: field 'rope_scaling' must be an object or null");
  }
  c.tied_embeddings = json.value("tie_word_embeddings", false);
  c.qkv_bias = arch.qkv_bias || json.value("attention_bias", false);
  c.output_proj_bias = false;
  // Mixtral: experts under `num_local_experts`, of `intermediate_size`, always renormalised.
  PETREL_RETURN_IF_ERROR(
      ReadHfExperts(json, "num_local_experts", nullptr, nullptr, /*default_norm=*/true, &c));
  return c;
}

void LlamaConfigToGguf(const ModelConfig& c, const Architecture& arch, GgufWriter* writer) {
  const std::string a = arch.gguf_name;
  writer->SetU32(a + ".context_length", uint32_t(c.max_context));
  writer->SetU32(a + ".embedding_length", uint32_t(c.dim));
  writer->SetU32(a + ".block_count", uint32_t(c.n_layers));
  writer->SetU32(a + ".feed_forward_length", uint32_t(c.ffn_dim));
  writer->SetU32(a + ".attention.head_count", uint32_t(c.n_heads));
  writer->SetU32(a + ".attention.head_count_kv", uint32_t(c.n_kv_heads));
  writer->SetU32(a + ".attention.key_length", uint32_t(c.head_dim));
  writer->SetU32(a + ".attention.value_length", uint32_t(c.head_dim));
  writer->SetF32(a + ".attention.layer_norm_rms_epsilon", c.norm_eps);
  writer->SetF32(a + ".rope.freq_base", c.rope.base);
  writer->SetU32(a + ".rope.dimension_count", uint32_t(c.rope.dims));
  writer->SetU32(a + ".vocab_size", uint32_t(c.n_vocab));
  if (c.sliding_window > 0) {
    writer->SetU32(a + ".attention.sliding_window", uint32_t(c.sliding_window));
  }
  if (c.rope.scaling == RopeScalingKind::kLinear) {
    writer->SetString(a + ".rope.scaling.type", "linear");
    writer->SetF32(a + ".rope.scaling.factor", c.rope.factor);
  } else if (c.rope.scaling == RopeScalingKind::kYarn) {
    writer->SetString(a + ".rope.scaling.type", "yarn");
    writer->SetF32(a + ".rope.scaling.factor", c.rope.factor);
    writer->SetU32(a + ".rope.scaling.original_context_length", uint32_t(c.rope.original_context));
    writer->SetF32(a + ".rope.scaling.yarn_beta_fast", c.rope.beta_fast);
    writer->SetF32(a + ".rope.scaling.yarn_beta_slow", c.rope.beta_slow);
    // No llama.cpp key says whether the ramp is rounded: petrel's own, only when it is not
    // (llama.cpp ignores it and rounds).
    if (!c.rope.yarn_truncate) writer->SetBool(a + ".rope.scaling.yarn_truncate", false);
    // llama.cpp's key multiplies 0.1·ln(factor) + 1; the reader does the same.
    const float mscale = c.rope.factor > 1.0f ? 0.1f * std::log(c.rope.factor) + 1.0f : 1.0f;
    if (c.rope.attn_factor != mscale) {
      writer->SetF32(a + ".rope.scaling.attn_factor", c.rope.attn_factor / mscale);
    }
  }
  if (c.rope.scaling == RopeScalingKind::kLongRope) {
    // As llama.cpp's converter: no scaling type, the factor tables as tensors (written by the
    // converter), the attention factor itself.
    writer->SetU32(a + ".rope.scaling.original_context_length", uint32_t(c.rope.original_context));
    writer->SetF32(a + ".rope.scaling.attn_factor", c.rope.attn_factor);
  }
  if (c.n_experts > 0) {
    writer->SetU32(a + ".expert_count", uint32_t(c.n_experts));
    writer->SetU32(a + ".expert_used_count", uint32_t(c.n_experts_used));
    writer->SetU32(a + ".expert_feed_forward_length", uint32_t(c.expert_ffn_dim));
    writer->SetBool(a + ".expert_weights_norm", c.expert_weights_norm);
  }
}

namespace {

BlockViews LlamaBlockViews(const LayerWeights& L) {
  BlockViews b;
  b.attn_norm = &L[kAttnNorm];
  b.wq = &L[kWq];
  b.wk = &L[kWk];
  b.wv = &L[kWv];
  b.wo = &L[kWo];
  b.bq = &L[kBq];
  b.bk = &L[kBk];
  b.bv = &L[kBv];
  b.ffn_norm = &L[kFfnNorm];
  b.ffn_gate = &L[kWGate];
  b.ffn_up = &L[kWUp];
  b.ffn_down = &L[kWDown];
  b.ffn_router = &L[kRouter];
  b.ffn_gate_exps = &L[kGateExps];
  b.ffn_up_exps = &L[kUpExps];
  b.ffn_down_exps = &L[kDownExps];
  return b;
}

}  // namespace

void BuildLlamaGraph(const ModelConfig& c, const ModelWeights& w, size_t n_tokens,
                     size_t n_selected, Graph* g) {
  BuildDecoderGraph({&LlamaBlockViews, FfnActivation::kSilu}, c, w, n_tokens, n_selected, g);
}

extern constinit const ArchitectureFamily kLlamaFamily =
    LlamaBlockFamily(&LlamaConfigFromGguf, &LlamaConfigFromHf, &LlamaConfigToGguf);

}  // namespace petrel
