// The Qwen3-MoE family: Qwen3's attention (per-head q/k RMS norms, head_dim set apart from the
// hidden size) with a mixture of experts in every block's feed-forward: a router, then each
// token's top-k of `expert_count` gated FFNs of width `expert_feed_forward_length` (HF
// `moe_intermediate_size`), weighted by the router's softmax, renormalised over the chosen ones
// (GGUF: always, as llama.cpp does; HF: when `norm_topk_prob`). GGUFs stack the experts in
// `ffn_{gate,up,down}_exps` tensors; HF folders keep `mlp.experts.<e>.*_proj` per expert.
#include <array>
#include <nlohmann/json.hpp>

#include "core/model/arch/decoder_graph.h"
#include "core/model/arch/decoder_weights.h"
#include "core/model/arch/llama.h"

namespace petrel {
namespace {

using namespace decoder_weights;

enum Qwen3MoeWeight : size_t {
  kAttnNorm,
  kWq,
  kWk,
  kWv,
  kWo,
  kQNorm,
  kKNorm,
  kFfnNorm,
  kRouter,
  kGateExps,
  kUpExps,
  kDownExps,
  kQwen3MoeWeightCount
};

constexpr std::array<WeightSpec, kQwen3MoeWeightCount> Qwen3MoeLayerWeights() {
  std::array<WeightSpec, kQwen3MoeWeightCount> w{};
  w[kAttnNorm] = {"attn_norm.weight", "input_layernorm.weight", kVector, &Dim};
  w[kWq] = {"attn_q.weight", "self_attn.q_proj.weight", kMatrix, &DimToQ, nullptr, true};
  w[kWk] = {"attn_k.weight", "self_attn.k_proj.weight", kMatrix, &DimToKv, nullptr, true};
  w[kWv] = {"attn_v.weight", "self_attn.v_proj.weight", kMatrix, &DimToKv};
  w[kWo] = {"attn_output.weight", "self_attn.o_proj.weight", kMatrix, &QToDim};
  w[kQNorm] = {"attn_q_norm.weight", "self_attn.q_norm.weight", kVector, &HeadDim};
  w[kKNorm] = {"attn_k_norm.weight", "self_attn.k_norm.weight", kVector, &HeadDim};
  w[kFfnNorm] = {"ffn_norm.weight", "post_attention_layernorm.weight", kVector, &Dim};
  w[kRouter] = {"ffn_gate_inp.weight", "mlp.gate.weight", kMatrix, &DimToExperts};
  w[kGateExps] = {"ffn_gate_exps.weight", "mlp.experts.*.gate_proj.weight", kExperts,
                  &DimToExpertFfn};
  w[kUpExps] = {"ffn_up_exps.weight", "mlp.experts.*.up_proj.weight", kExperts, &DimToExpertFfn};
  w[kDownExps] = {"ffn_down_exps.weight", "mlp.experts.*.down_proj.weight", kExperts,
                  &ExpertFfnToDim};
  return w;
}

constexpr std::array<WeightSpec, kQwen3MoeWeightCount> kQwen3MoeLayerWeights =
    Qwen3MoeLayerWeights();
static_assert(AllSpecsSet(kQwen3MoeLayerWeights), "every Qwen3MoeWeight needs its row");

// Every block of this family is a mixture: a config without experts is malformed.
Status CheckHasExperts(const ModelConfig& c, const char* count_key) {
  if (c.n_experts <= 0) {
    return Error("%s is missing or 0: a Qwen3-MoE model needs experts", count_key);
  }
  return Status::Ok();
}

Result<ModelConfig> Qwen3MoeConfigFromGguf(const GgufFile& file, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromGguf(file, arch));
  c.qk_norm = true;
  PETREL_RETURN_IF_ERROR(
      CheckHasExperts(c, (std::string(arch.gguf_name) + ".expert_count").c_str()));
  return c;
}

Result<ModelConfig> Qwen3MoeConfigFromHf(const nlohmann::json& json, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromHf(json, arch));
  c.qk_norm = true;
  c.sliding_window = 0;  // as Qwen3: only with use_sliding_window, which no release sets
  // HF's default for norm_topk_prob is false.
  PETREL_RETURN_IF_ERROR(ReadHfExperts(json, "num_experts", "moe_intermediate_size",
                                       "norm_topk_prob", /*default_norm=*/false, &c));
  PETREL_RETURN_IF_ERROR(CheckHasExperts(c, "config.json: num_experts"));
  // Dense blocks among the sparse ones are not built here; refuse rather than misread them.
  if (auto it = json.find("mlp_only_layers");
      it != json.end() && !(it->is_null() || (it->is_array() && it->empty()))) {
    return Error("config.json: mlp_only_layers (dense blocks among expert blocks) is not supported");
  }
  if (auto it = json.find("decoder_sparse_step");
      it != json.end() && !(it->is_null() || (it->is_number_integer() && it->get<int64_t>() == 1))) {
    return Error("config.json: decoder_sparse_step other than 1 is not supported");
  }
  return c;
}

BlockViews Qwen3MoeBlockViews(const LayerWeights& L) {
  BlockViews b;
  b.attn_norm = &L[kAttnNorm];
  b.wq = &L[kWq];
  b.wk = &L[kWk];
  b.wv = &L[kWv];
  b.wo = &L[kWo];
  b.q_norm = &L[kQNorm];
  b.k_norm = &L[kKNorm];
  b.ffn_norm = &L[kFfnNorm];
  b.ffn_router = &L[kRouter];
  b.ffn_gate_exps = &L[kGateExps];
  b.ffn_up_exps = &L[kUpExps];
  b.ffn_down_exps = &L[kDownExps];
  return b;
}

void BuildQwen3MoeGraph(const ModelConfig& c, const ModelWeights& w, size_t n_tokens,
                        size_t n_selected, Graph* g) {
  BuildDecoderGraph({&Qwen3MoeBlockViews, FfnActivation::kSilu}, c, w, n_tokens, n_selected, g);
}

}  // namespace

extern constinit const ArchitectureFamily kQwen3MoeFamily = {
    "model.layers.",
    kQwen3MoeLayerWeights,
    decoder_weights::kTokenEmbd,
    decoder_weights::kOutputNorm,
    decoder_weights::kOutput,
    &Qwen3MoeConfigFromGguf,
    &Qwen3MoeConfigFromHf,
    &LlamaConfigToGguf,
    &BuildQwen3MoeGraph,
};

}  // namespace petrel
