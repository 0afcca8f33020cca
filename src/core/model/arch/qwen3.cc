// The Qwen3 family: Llama's block plus a per-head RMS norm of q and k before RoPE, and heads
// whose size is set apart from the hidden size (head_dim, GGUF `attention.key_length`). GGUF
// and HF checkpoints both rotate half-split pairs (llama.cpp does not permute Qwen's Q/K rows).
#include <array>
#include <nlohmann/json.hpp>

#include "core/model/arch/decoder_graph.h"
#include "core/model/arch/decoder_weights.h"
#include "core/model/arch/llama.h"

namespace petrel {
namespace {

using namespace decoder_weights;

enum Qwen3Weight : size_t {
  kAttnNorm,
  kWq,
  kWk,
  kWv,
  kWo,
  kQNorm,
  kKNorm,
  kFfnNorm,
  kWGate,
  kWUp,
  kWDown,
  kQwen3WeightCount
};

constexpr std::array<WeightSpec, kQwen3WeightCount> Qwen3LayerWeights() {
  std::array<WeightSpec, kQwen3WeightCount> w{};
  w[kAttnNorm] = {"attn_norm.weight", "input_layernorm.weight", kVector, &Dim};
  w[kWq] = {"attn_q.weight", "self_attn.q_proj.weight", kMatrix, &DimToQ, nullptr, true};
  w[kWk] = {"attn_k.weight", "self_attn.k_proj.weight", kMatrix, &DimToKv, nullptr, true};
  w[kWv] = {"attn_v.weight", "self_attn.v_proj.weight", kMatrix, &DimToKv};
  w[kWo] = {"attn_output.weight", "self_attn.o_proj.weight", kMatrix, &QToDim};
  w[kQNorm] = {"attn_q_norm.weight", "self_attn.q_norm.weight", kVector, &HeadDim};
  w[kKNorm] = {"attn_k_norm.weight", "self_attn.k_norm.weight", kVector, &HeadDim};
  w[kFfnNorm] = {"ffn_norm.weight", "post_attention_layernorm.weight", kVector, &Dim};
  w[kWGate] = {"ffn_gate.weight", "mlp.gate_proj.weight", kMatrix, &DimToFfn};
  w[kWUp] = {"ffn_up.weight", "mlp.up_proj.weight", kMatrix, &DimToFfn};
  w[kWDown] = {"ffn_down.weight", "mlp.down_proj.weight", kMatrix, &FfnToDim};
  return w;
}

constexpr std::array<WeightSpec, kQwen3WeightCount> kQwen3LayerWeights = Qwen3LayerWeights();
static_assert(AllSpecsSet(kQwen3LayerWeights), "every Qwen3Weight needs its row");

Result<ModelConfig> Qwen3ConfigFromGguf(const GgufFile& file, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromGguf(file, arch));
  c.qk_norm = true;
  return c;
}

Result<ModelConfig> Qwen3ConfigFromHf(const nlohmann::json& json, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromHf(json, arch));
  c.qk_norm = true;
  // `sliding_window` is only used with `use_sliding_window` (off in every released Qwen3), and
  // llama.cpp never applies it.
  c.sliding_window = 0;
  return c;
}

BlockViews Qwen3BlockViews(const LayerWeights& L) {
  BlockViews b;
  b.attn_norm = &L[kAttnNorm];
  b.wq = &L[kWq];
  b.wk = &L[kWk];
  b.wv = &L[kWv];
  b.wo = &L[kWo];
  b.q_norm = &L[kQNorm];
  b.k_norm = &L[kKNorm];
  b.ffn_norm = &L[kFfnNorm];
  b.ffn_gate = &L[kWGate];
  b.ffn_up = &L[kWUp];
  b.ffn_down = &L[kWDown];
  return b;
}

void BuildQwen3Graph(const ModelConfig& c, const ModelWeights& w, size_t n_tokens,
                     size_t n_selected, Graph* g) {
  BuildDecoderGraph({&Qwen3BlockViews, FfnActivation::kSilu}, c, w, n_tokens, n_selected, g);
}

}  // namespace

extern constinit const ArchitectureFamily kQwen3Family = {
    "model.layers.",
    kQwen3LayerWeights,
    decoder_weights::kTokenEmbd,
    decoder_weights::kOutputNorm,
    decoder_weights::kOutput,
    &Qwen3ConfigFromGguf,
    &Qwen3ConfigFromHf,
    &LlamaConfigToGguf,
    &BuildQwen3Graph,
};

}  // namespace petrel
