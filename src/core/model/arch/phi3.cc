// The Phi-3 family: Llama's block with fused tensors: one `attn_qkv` whose rows are [q | k | v]
// and one `ffn_up` whose rows are [gate | up] (SiLU on the first half). The parts are bound as
// row views into the fused tensors (loader: WeightSpec::fused_in), so the mapped weights are
// used as they are and the graph is Llama's. Pairs rotate half-split in GGUF and HF alike.
#include <array>
#include <nlohmann/json.hpp>

#include "core/format/gguf.h"
#include "core/model/arch/decoder_graph.h"
#include "core/model/arch/decoder_weights.h"
#include "core/model/arch/llama.h"

namespace petrel {
namespace {

using namespace decoder_weights;

enum Phi3Weight : size_t {
  kAttnNorm,
  kWqkv,
  kWq,
  kWk,
  kWv,
  kWo,
  kFfnNorm,
  kWGateUp,
  kWGate,
  kWUp,
  kWDown,
  kPhi3WeightCount
};

WeightShape DimToQkv(Config c) { return {c.dim, c.q_dim() + 2 * c.kv_dim()}; }
WeightShape DimToGateUp(Config c) { return {c.dim, 2 * c.ffn_dim}; }
int64_t FirstRow(Config) { return 0; }
int64_t AfterQ(Config c) { return c.q_dim(); }
int64_t AfterQk(Config c) { return c.q_dim() + c.kv_dim(); }
int64_t AfterGate(Config c) { return c.ffn_dim; }

// A part of a fused tensor: its names only label it (it is never looked up).
constexpr WeightSpec Part(const char* gguf_label, const char* hf_label,
                          WeightShape (*shape)(Config), Phi3Weight fused_in,
                          int64_t (*first_row)(Config)) {
  return {gguf_label, hf_label, kMatrix, shape, nullptr, false, 0.0f, int(fused_in), first_row};
}

constexpr std::array<WeightSpec, kPhi3WeightCount> Phi3LayerWeights() {
  std::array<WeightSpec, kPhi3WeightCount> w{};
  w[kAttnNorm] = {"attn_norm.weight", "input_layernorm.weight", kVector, &Dim};
  w[kWqkv] = {"attn_qkv.weight", "self_attn.qkv_proj.weight", kMatrix, &DimToQkv};
  w[kWq] = Part("attn_qkv.weight[q]", "self_attn.qkv_proj.weight[q]", &DimToQ, kWqkv, &FirstRow);
  w[kWk] = Part("attn_qkv.weight[k]", "self_attn.qkv_proj.weight[k]", &DimToKv, kWqkv, &AfterQ);
  w[kWv] = Part("attn_qkv.weight[v]", "self_attn.qkv_proj.weight[v]", &DimToKv, kWqkv, &AfterQk);
  w[kWo] = {"attn_output.weight", "self_attn.o_proj.weight", kMatrix, &QToDim};
  w[kFfnNorm] = {"ffn_norm.weight", "post_attention_layernorm.weight", kVector, &Dim};
  w[kWGateUp] = {"ffn_up.weight", "mlp.gate_up_proj.weight", kMatrix, &DimToGateUp};
  w[kWGate] = Part("ffn_up.weight[gate]", "mlp.gate_up_proj.weight[gate]", &DimToFfn, kWGateUp,
                   &FirstRow);
  w[kWUp] = Part("ffn_up.weight[up]", "mlp.gate_up_proj.weight[up]", &DimToFfn, kWGateUp,
                 &AfterGate);
  w[kWDown] = {"ffn_down.weight", "mlp.down_proj.weight", kMatrix, &FfnToDim};
  return w;
}

constexpr std::array<WeightSpec, kPhi3WeightCount> kPhi3LayerWeights = Phi3LayerWeights();
static_assert(AllSpecsSet(kPhi3LayerWeights), "every Phi3Weight needs its row");

Result<ModelConfig> Phi3ConfigFromGguf(const GgufFile& file, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromGguf(file, arch));
  // Long-context Phi-3 variants' LongRoPE tables are read with Llama's keys (rope_scaling.h).
  // Phi-3's `sliding_window` is ignored, as llama.cpp does: attention is over the full context.
  c.sliding_window = 0;
  return c;
}

Result<ModelConfig> Phi3ConfigFromHf(const nlohmann::json& json, const Architecture& arch) {
  PETREL_ASSIGN_OR_RETURN(ModelConfig c, LlamaConfigFromHf(json, arch));
  if (auto it = json.find("partial_rotary_factor"); it != json.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0.0) || it->get<double>() > 1.0) {
      return Error("config.json: field 'partial_rotary_factor' must be a number in (0, 1]");
    }
    c.rope.dims = int64_t(double(c.head_dim) * it->get<double>());
  }
  c.sliding_window = 0;
  return c;
}

BlockViews Phi3BlockViews(const LayerWeights& L) {
  BlockViews b;
  b.attn_norm = &L[kAttnNorm];
  b.wq = &L[kWq];
  b.wk = &L[kWk];
  b.wv = &L[kWv];
  b.wo = &L[kWo];
  b.ffn_norm = &L[kFfnNorm];
  b.ffn_gate = &L[kWGate];
  b.ffn_up = &L[kWUp];
  b.ffn_down = &L[kWDown];
  return b;
}

void BuildPhi3Graph(const ModelConfig& c, const ModelWeights& w, size_t n_tokens,
                    size_t n_selected, Graph* g) {
  BuildDecoderGraph({&Phi3BlockViews, FfnActivation::kSilu}, c, w, n_tokens, n_selected, g);
}

}  // namespace

extern constinit const ArchitectureFamily kPhi3Family = {
    "model.layers.",
    kPhi3LayerWeights,
    decoder_weights::kTokenEmbd,
    decoder_weights::kOutputNorm,
    decoder_weights::kOutput,
    &Phi3ConfigFromGguf,
    &Phi3ConfigFromHf,
    &LlamaConfigToGguf,
    &BuildPhi3Graph,
};

}  // namespace petrel
