// The OLMo 2 family (GGUF arch `olmo2`, HF `Olmo2ForCausalLM`): Llama's block with its two norms
// moved onto the sublayers' outputs (no norm on their inputs):
//   x += n_attn(Wo · Attn(RoPE(n_q(Wq x)), RoPE(n_k(Wk x)), Wv x));  x += n_ffn(FFN(x))
// where n_q and n_k are RMS norms over the whole q and k projections (every head at once, not
// per head), before the split into heads and RoPE. HF's `post_attention_layernorm` is that
// post-attention norm here (in Llama it is the pre-FFN norm); GGUF `post_attention_norm` and
// `post_ffw_norm`. Pairs rotate half-split in GGUF and HF alike (rows not permuted).
#include <array>
#include <nlohmann/json.hpp>

#include "core/model/arch/decoder_graph.h"
#include "core/model/arch/decoder_weights.h"
#include "core/model/arch/llama.h"

namespace petrel {
namespace {

using namespace decoder_weights;

enum Olmo2Weight : size_t {
  kWq,
  kWk,
  kWv,
  kWo,
  kQNorm,
  kKNorm,
  kAttnPostNorm,
  kWGate,
  kWUp,
  kWDown,
  kFfnPostNorm,
  kOlmo2WeightCount
};

constexpr std::array<WeightSpec, kOlmo2WeightCount> Olmo2LayerWeights() {
  std::array<WeightSpec, kOlmo2WeightCount> w{};
  w[kWq] = {"attn_q.weight", "self_attn.q_proj.weight", kMatrix, &DimToQ, nullptr, true};
  w[kWk] = {"attn_k.weight", "self_attn.k_proj.weight", kMatrix, &DimToKv, nullptr, true};
  w[kWv] = {"attn_v.weight", "self_attn.v_proj.weight", kMatrix, &DimToKv};
  w[kWo] = {"attn_output.weight", "self_attn.o_proj.weight", kMatrix, &QToDim};
  // One weight per element of the whole projection; its elements follow the rows' pair layout.
  w[kQNorm] = {"attn_q_norm.weight", "self_attn.q_norm.weight", kVector, &QDim, nullptr, true};
  w[kKNorm] = {"attn_k_norm.weight", "self_attn.k_norm.weight", kVector, &KvDim, nullptr, true};
  w[kAttnPostNorm] = {"post_attention_norm.weight", "post_attention_layernorm.weight", kVector,
                      &Dim};
  w[kWGate] = {"ffn_gate.weight", "mlp.gate_proj.weight", kMatrix, &DimToFfn};
  w[kWUp] = {"ffn_up.weight", "mlp.up_proj.weight", kMatrix, &DimToFfn};
  w[kWDown] = {"ffn_down.weight", "mlp.down_proj.weight", kMatrix, &FfnToDim};
  w[kFfnPostNorm] = {"post_ffw_norm.weight", "post_feedforward_layernorm.weight", kVector, &Dim};
  return w;
}

constexpr std::array<WeightSpec, kOlmo2WeightCount> kOlmo2LayerWeights = Olmo2LayerWeights();
static_assert(AllSpecsSet(kOlmo2LayerWeights), "every Olmo2Weight needs its row");

Result<ModelConfig> Olmo2ConfigFromGguf(const GgufFile& file, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromGguf(file, arch));
  c.norms_after_sublayers = true;
  return c;
}

Result<ModelConfig> Olmo2ConfigFromHf(const nlohmann::json& json, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromHf(json, arch));
  if (c.qkv_bias)
    return Error("config.json: field 'attention_bias': OLMo 2 biases are not supported");
  c.norms_after_sublayers = true;
  c.sliding_window = 0;  // OLMo 2 has none (OLMo 3's windows are another family)
  return c;
}

// The block's two norms go in the pre-norm slots: `norms_after_sublayers` moves them onto the
// sublayers' outputs (decoder_graph.h), which is what makes them OLMo 2's post-norms.
BlockViews Olmo2BlockViews(const LayerWeights& L) {
  BlockViews b;
  b.attn_norm = &L[kAttnPostNorm];
  b.wq = &L[kWq];
  b.wk = &L[kWk];
  b.wv = &L[kWv];
  b.wo = &L[kWo];
  b.q_norm = &L[kQNorm];
  b.k_norm = &L[kKNorm];
  b.ffn_norm = &L[kFfnPostNorm];
  b.ffn_gate = &L[kWGate];
  b.ffn_up = &L[kWUp];
  b.ffn_down = &L[kWDown];
  return b;
}

void BuildOlmo2Graph(const ModelConfig& c, const ModelWeights& w, size_t n_tokens,
                     size_t n_selected, Graph* g) {
  BuildDecoderGraph({&Olmo2BlockViews, FfnActivation::kSilu}, c, w, n_tokens, n_selected, g);
}

}  // namespace

extern constinit const ArchitectureFamily kOlmo2Family = {
    "model.layers.",
    kOlmo2LayerWeights,
    decoder_weights::kTokenEmbd,
    decoder_weights::kOutputNorm,
    decoder_weights::kOutput,
    &Olmo2ConfigFromGguf,
    &Olmo2ConfigFromHf,
    &LlamaConfigToGguf,
    &BuildOlmo2Graph,
};

}  // namespace petrel
