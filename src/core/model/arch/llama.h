// The Llama family (Llama 2/3, Mistral, Qwen2). Its registry entry is `kLlamaFamily`; the config
// readers and writer are declared for families that share Llama's hyperparameter keys.
#pragma once

#include <array>

#include "core/model/arch/decoder_weights.h"
#include "core/model/architecture.h"

namespace petrel {

extern const ArchitectureFamily kLlamaFamily;

ConfigFromGgufFn LlamaConfigFromGguf;
ConfigFromHfFn LlamaConfigFromHf;
ConfigToGgufFn LlamaConfigToGguf;
BuildGraphFn BuildLlamaGraph;

// Llama's block: its weight table, shared by the families whose blocks are Llama's and whose
// differences are all in the config (Granite's multipliers, SmolLM3's NoPE layers), which the
// decoder graph reads from ModelConfig.
namespace llama_block {
using namespace decoder_weights;

// A block's weights, in the order loaders and converters visit them.
enum Weight : size_t {
  kAttnNorm,
  kWq,
  kWk,
  kWv,
  kWo,
  kBq,
  kBk,
  kBv,
  kFfnNorm,
  kWGate,
  kWUp,
  kWDown,
  kRouter,  // Mixtral-style experts, present when the config has experts
  kGateExps,
  kUpExps,
  kDownExps,
  kWeightCount
};

static inline bool Dense(Config c) { return c.n_experts == 0; }
static inline bool Experts(Config c) { return c.n_experts > 0; }
static inline bool QkvBias(Config c) { return c.qkv_bias; }

constexpr std::array<WeightSpec, kWeightCount> WeightTable() {
  std::array<WeightSpec, kWeightCount> w{};
  w[kAttnNorm] = {"attn_norm.weight", "input_layernorm.weight", kVector, &Dim, nullptr, false};
  w[kWq] = {"attn_q.weight", "self_attn.q_proj.weight", kMatrix, &DimToQ, nullptr, true};
  w[kWk] = {"attn_k.weight", "self_attn.k_proj.weight", kMatrix, &DimToKv, nullptr, true};
  w[kWv] = {"attn_v.weight", "self_attn.v_proj.weight", kMatrix, &DimToKv, nullptr, false};
  w[kWo] = {"attn_output.weight", "self_attn.o_proj.weight", kMatrix, &QToDim, nullptr, false};
  w[kBq] = {"attn_q.bias", "self_attn.q_proj.bias", kVector, &QDim, &QkvBias, true};
  w[kBk] = {"attn_k.bias", "self_attn.k_proj.bias", kVector, &KvDim, &QkvBias, true};
  w[kBv] = {"attn_v.bias", "self_attn.v_proj.bias", kVector, &KvDim, &QkvBias, false};
  w[kFfnNorm] = {
      "ffn_norm.weight", "post_attention_layernorm.weight", kVector, &Dim, nullptr, false};
  w[kWGate] = {"ffn_gate.weight", "mlp.gate_proj.weight", kMatrix, &DimToFfn, &Dense, false};
  w[kWUp] = {"ffn_up.weight", "mlp.up_proj.weight", kMatrix, &DimToFfn, &Dense, false};
  w[kWDown] = {"ffn_down.weight", "mlp.down_proj.weight", kMatrix, &FfnToDim, &Dense, false};
  // Mixtral's HF names; w1 is the gate, w3 the up and w2 the down projection.
  w[kRouter] = {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight", kMatrix, &DimToExperts,
                &Experts, false};
  w[kGateExps] = {"ffn_gate_exps.weight", "block_sparse_moe.experts.*.w1.weight",
                  WeightKind::kExperts, &DimToExpertFfn, &Experts, false};
  w[kUpExps] = {"ffn_up_exps.weight", "block_sparse_moe.experts.*.w3.weight",
                WeightKind::kExperts, &DimToExpertFfn, &Experts, false};
  w[kDownExps] = {"ffn_down_exps.weight", "block_sparse_moe.experts.*.w2.weight",
                  WeightKind::kExperts, &ExpertFfnToDim, &Experts, false};
  return w;
}

constexpr std::array<WeightSpec, kWeightCount> kLayerWeights = WeightTable();
static_assert(AllSpecsSet(kLayerWeights), "every llama_block::Weight needs its row");

}  // namespace llama_block

// A family with Llama's weights and graph and its own config reader and writer.
static constexpr ArchitectureFamily LlamaBlockFamily(ConfigFromGgufFn* from_gguf, ConfigFromHfFn* from_hf,
                                              ConfigToGgufFn* to_gguf) {
  return {"model.layers.",          llama_block::kLayerWeights, decoder_weights::kTokenEmbd,
          decoder_weights::kOutputNorm, decoder_weights::kOutput, from_gguf, from_hf, to_gguf,
          &BuildLlamaGraph};
}

// Mixture-of-experts hyperparameters: GGUF `<arch>.expert_count`, `expert_used_count`,
// `expert_feed_forward_length` (default `default_ffn`) and `expert_weights_norm` (default true).
Status ReadGgufExperts(const GgufFile& file, const Architecture& arch, int64_t default_ffn,
                       ModelConfig* config);
// The same from config.json: the expert count under `count_field`, `num_experts_per_tok`, the
// width under `ffn_field` (nullptr or absent: `intermediate_size`), renormalisation under
// `norm_field` (nullptr or absent: `default_norm`). No count field: a dense model.
Status ReadHfExperts(const nlohmann::json& json, const char* count_field, const char* ffn_field,
                     const char* norm_field, bool default_norm, ModelConfig* config);

}  // namespace petrel
