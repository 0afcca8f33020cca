// The DeepSeek V2/V3 family (GGUF arch `deepseek2`; HF `deepseek_v2` / `deepseek_v3`):
// multi-head latent attention and a mixture of experts with shared experts.
//
// Attention (MLA): q = Wq_b n(Wq_a h) (or Wq h when q_lora_rank is 0), per head [nope | rope];
// Wkv_a h = [c | k_rope] with c of kv_lora_rank and one rope key shared by every head;
// c = n_kv(c); head h's key is [W_UK[h] c | k_rope] and its value W_UV[h] c. The cache keeps only
// [c | k_rope] per token (docs/ARCHITECTURE.md, "Latent attention"). GGUFs (llama.cpp's current
// converter) store W_UK transposed per head as attn_k_b [nope, kv_lora, H] and W_UV as attn_v_b
// [kv_lora, v, H]; HF folders (and legacy GGUFs, attn_kv_b) keep both in kv_b_proj
// [H (nope + v), kv_lora], split here at load. Both rotate interleaved pairs, rows unpermuted.
//
// Feed-forward: the first `first_k_dense_replace` (GGUF `leading_dense_block_count`) blocks are
// dense SwiGLU; the others route each token to top-k experts (softmax scores for V2, sigmoid
// plus a correction bias for choosing for V3, optionally limited to the best expert groups) and
// add `n_shared_experts` shared experts run for every token.
#include <array>
#include <cmath>
#include <cstring>
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

enum DeepSeek2Weight : size_t {
  kAttnNorm,
  kWqA,       // q_lora_rank > 0: the q down-projection, its norm, the q up-projection
  kQANorm,
  kWqB,
  kWq,        // q_lora_rank == 0: the direct q projection
  kWkvA,      // [c | k_rope] in one tensor, bound as its two row ranges below
  kWkvALatent,
  kWkvARope,
  kKvANorm,
  kWkB,       // W_UK^T per head
  kWvB,       // W_UV per head
  kWo,
  kFfnNorm,
  kWGate,     // dense blocks
  kWUp,
  kWDown,
  kRouter,    // expert blocks
  kRouterBias,
  kGateExps,
  kUpExps,
  kDownExps,
  kGateShexp,
  kUpShexp,
  kDownShexp,
  kDeepSeek2WeightCount
};

WeightShape QRank(Config c) { return {c.q_lora_rank, 1}; }
WeightShape KvRank(Config c) { return {c.kv_lora_rank, 1}; }
WeightShape Experts(Config c) { return {c.n_experts, 1}; }
WeightShape DimToQRank(Config c) { return {c.dim, c.q_lora_rank}; }
WeightShape QRankToQ(Config c) { return {c.q_lora_rank, c.q_dim()}; }
WeightShape DimToKvA(Config c) { return {c.dim, c.kv_lora_rank + c.rope.dims}; }
WeightShape DimToKvRank(Config c) { return {c.dim, c.kv_lora_rank}; }
WeightShape DimToRope(Config c) { return {c.dim, c.rope.dims}; }
WeightShape NopeToKvRank(Config c) { return {c.qk_nope_dim, c.kv_lora_rank}; }
WeightShape KvRankToV(Config c) { return {c.kv_lora_rank, c.v_head_dim}; }
WeightShape VToDim(Config c) { return {c.n_heads * c.v_head_dim, c.dim}; }
WeightShape DimToShared(Config c) { return {c.dim, c.n_shared_experts * c.expert_ffn_dim}; }
WeightShape SharedToDim(Config c) { return {c.n_shared_experts * c.expert_ffn_dim, c.dim}; }
int64_t FirstRow(Config) { return 0; }
int64_t RopeRow(Config c) { return c.kv_lora_rank; }
bool QLora(Config c) { return c.q_lora_rank > 0; }
bool NoQLora(Config c) { return c.q_lora_rank == 0; }
bool Sigmoid(Config c) { return c.expert_gating == MoeGating::kSigmoid; }
bool Shared(Config c) { return c.n_shared_experts > 0; }
bool DenseBlock(Config c, int64_t layer) { return !c.LayerHasExperts(layer); }
bool ExpertBlock(Config c, int64_t layer) { return c.LayerHasExperts(layer); }

// kv_b_proj [H (nope + v), kv_lora] (ne [kv_lora, H (nope + v)]) -> attn_k_b / attn_v_b. Element
// copies, so any float type stays as it is; block types cannot be transposed.
// The element size of `from`, after checking its type and shape.
Result<size_t> CheckKvB(const TensorView& from, Config c) {
  const size_t elem = from.desc.dtype == DType::kF32 ? 4
                      : (from.desc.dtype == DType::kF16 || from.desc.dtype == DType::kBF16) ? 2
                                                                                           : 0;
  if (elem == 0) {
    return Error("kv_b of type %s cannot be split per head (needs F32, F16 or BF16)",
                 DTypeName(from.desc.dtype));
  }
  if (from.desc.n_dims != 2 || from.desc.ne[0] != c.kv_lora_rank ||
      from.desc.ne[1] != c.n_heads * (c.qk_nope_dim + c.v_head_dim)) {
    return Error("has shape %s, expected [%lld, %lld]", from.desc.ShapeString().c_str(),
                 (long long)c.kv_lora_rank, (long long)(c.n_heads * (c.qk_nope_dim + c.v_head_dim)));
  }
  return elem;
}

Status MakeKB(const TensorView& from, Config c, TensorView* out) {
  PETREL_ASSIGN_OR_RETURN(const size_t elem, CheckKvB(from, c));
  const size_t L = size_t(c.kv_lora_rank), N = size_t(c.qk_nope_dim), V = size_t(c.v_head_dim);
  const char* src = static_cast<const char*>(from.data);
  char* dst = static_cast<char*>(out->data);
  for (size_t h = 0; h < size_t(c.n_heads); ++h) {
    for (size_t j = 0; j < L; ++j) {      // output row j of head h: column j of W_UK[h]
      for (size_t i = 0; i < N; ++i) {
        std::memcpy(dst + ((h * L + j) * N + i) * elem, src + ((h * (N + V) + i) * L + j) * elem,
                    elem);
      }
    }
  }
  return Status::Ok();
}

Status MakeVB(const TensorView& from, Config c, TensorView* out) {
  PETREL_ASSIGN_OR_RETURN(const size_t elem, CheckKvB(from, c));
  const size_t L = size_t(c.kv_lora_rank), N = size_t(c.qk_nope_dim), V = size_t(c.v_head_dim);
  const char* src = static_cast<const char*>(from.data);
  char* dst = static_cast<char*>(out->data);
  for (size_t h = 0; h < size_t(c.n_heads); ++h) {
    std::memcpy(dst + h * V * L * elem, src + (h * (N + V) + N) * L * elem, V * L * elem);
  }
  return Status::Ok();
}

constexpr WeightDerivation kKBFromKvB = {"attn_kv_b.weight", "self_attn.kv_b_proj.weight", &MakeKB};
constexpr WeightDerivation kVBFromKvB = {"attn_kv_b.weight", "self_attn.kv_b_proj.weight", &MakeVB};

constexpr WeightKind kHeads = WeightKind::kHeads;

constexpr std::array<WeightSpec, kDeepSeek2WeightCount> DeepSeek2LayerWeights() {
  std::array<WeightSpec, kDeepSeek2WeightCount> w{};
  w[kAttnNorm] = {"attn_norm.weight", "input_layernorm.weight", kVector, &Dim};
  w[kWqA] = {"attn_q_a.weight", "self_attn.q_a_proj.weight", kMatrix, &DimToQRank, &QLora};
  w[kQANorm] = {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight", kVector, &QRank, &QLora};
  w[kWqB] = {"attn_q_b.weight", "self_attn.q_b_proj.weight", kMatrix, &QRankToQ, &QLora};
  w[kWq] = {"attn_q.weight", "self_attn.q_proj.weight", kMatrix, &DimToQ, &NoQLora};
  w[kWkvA] = {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight", kMatrix, &DimToKvA};
  // The two row ranges of the fused tensor, named like Phi-3's parts ("name[part]").
  w[kWkvALatent] = {"attn_kv_a_mqa.weight[latent]", "self_attn.kv_a_proj_with_mqa.weight[latent]",
                    kMatrix, &DimToKvRank};
  w[kWkvALatent].fused_in = kWkvA;
  w[kWkvALatent].first_row = &FirstRow;
  w[kWkvARope] = {"attn_kv_a_mqa.weight[rope]", "self_attn.kv_a_proj_with_mqa.weight[rope]",
                  kMatrix, &DimToRope};
  w[kWkvARope].fused_in = kWkvA;
  w[kWkvARope].first_row = &RopeRow;
  w[kKvANorm] = {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight", kVector, &KvRank};
  // The HF names are the tensor they are made from (WeightSpec::derived).
  w[kWkB] = {"attn_k_b.weight", "self_attn.kv_b_proj.weight", kHeads, &NopeToKvRank};
  w[kWkB].derived = &kKBFromKvB;
  w[kWvB] = {"attn_v_b.weight", "self_attn.kv_b_proj.weight", kHeads, &KvRankToV};
  w[kWvB].derived = &kVBFromKvB;
  w[kWo] = {"attn_output.weight", "self_attn.o_proj.weight", kMatrix, &VToDim};
  w[kFfnNorm] = {"ffn_norm.weight", "post_attention_layernorm.weight", kVector, &Dim};
  w[kWGate] = {"ffn_gate.weight", "mlp.gate_proj.weight", kMatrix, &DimToFfn};
  w[kWUp] = {"ffn_up.weight", "mlp.up_proj.weight", kMatrix, &DimToFfn};
  w[kWDown] = {"ffn_down.weight", "mlp.down_proj.weight", kMatrix, &FfnToDim};
  for (size_t i : {kWGate, kWUp, kWDown}) w[i].in_layer = &DenseBlock;
  w[kRouter] = {"ffn_gate_inp.weight", "mlp.gate.weight", kMatrix, &DimToExperts};
  w[kRouterBias] = {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias", kVector, &Experts,
                    &Sigmoid};
  w[kGateExps] = {"ffn_gate_exps.weight", "mlp.experts.*.gate_proj.weight", kExperts,
                  &DimToExpertFfn};
  w[kUpExps] = {"ffn_up_exps.weight", "mlp.experts.*.up_proj.weight", kExperts, &DimToExpertFfn};
  w[kDownExps] = {"ffn_down_exps.weight", "mlp.experts.*.down_proj.weight", kExperts,
                  &ExpertFfnToDim};
  w[kGateShexp] = {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight", kMatrix,
                   &DimToShared, &Shared};
  w[kUpShexp] = {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight", kMatrix,
                 &DimToShared, &Shared};
  w[kDownShexp] = {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight", kMatrix,
                   &SharedToDim, &Shared};
  for (size_t i : {kRouter, kRouterBias, kGateExps, kUpExps, kDownExps, kGateShexp, kUpShexp,
                   kDownShexp}) {
    w[i].in_layer = &ExpertBlock;
  }
  return w;
}

constexpr std::array<WeightSpec, kDeepSeek2WeightCount> kDeepSeek2LayerWeights =
    DeepSeek2LayerWeights();
static_assert(AllSpecsSet(kDeepSeek2LayerWeights), "every DeepSeek2Weight needs its row");

std::string Key(const Architecture& arch, const char* suffix) {
  return std::string(arch.gguf_name) + "." + suffix;
}

int64_t Clamp(uint64_t v) { return int64_t(v > (uint64_t(1) << 40) ? (uint64_t(1) << 40) : v); }

// What both sources must give: a latent attention.
Status CheckLatent(const ModelConfig& c, const char* where) {
  if (c.kv_lora_rank <= 0) {
    return Error("%s is 0: DeepSeek2's latent attention needs a kv lora rank", where);
  }
  return Status::Ok();
}

// DeepSeek's YaRN: besides the frequencies' ramp, the softmax scale 1/sqrt(head_dim) is
// multiplied by m², m = 1 + 0.1·mscale_all_dim·ln(factor) (the reference model's `softmax_scale`;
// llama.cpp's GGUF key `rope.scaling.yarn_log_multiplier` holds 0.1·mscale_all_dim). The
// rotation itself is scaled by mscale / mscale_all_dim's ratio of the same form, 1 in the
// published configs.
Status SetYarnSoftmaxScale(double log_multiplier, const char* where, ModelConfig* c) {
  if (!std::isfinite(log_multiplier) || log_multiplier < 0.0) {
    return Error("%s: yarn log multiplier %g must be finite and not negative", where,
                 log_multiplier);
  }
  const double factor = c->rope.factor;
  const double m = factor > 1.0 ? 1.0 + log_multiplier * std::log(factor) : 1.0;
  c->attention_scale = float(m * m / std::sqrt(double(c->head_dim)));
  return Status::Ok();
}

Result<ModelConfig> DeepSeek2ConfigFromGguf(const GgufFile& file, const Architecture& arch) {
  ModelConfig c;
  c.architecture = arch.gguf_name;
  PETREL_ASSIGN_OR_RETURN(uint64_t dim, file.GetUint(Key(arch, "embedding_length")));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_layers, file.GetUint(Key(arch, "block_count")));
  PETREL_ASSIGN_OR_RETURN(uint64_t ffn, file.GetUint(Key(arch, "feed_forward_length")));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_heads, file.GetUint(Key(arch, "attention.head_count")));
  PETREL_ASSIGN_OR_RETURN(uint64_t ctx, file.GetUintOr(Key(arch, "context_length"), 2048));
  PETREL_ASSIGN_OR_RETURN(double eps,
                          file.GetFloatOr(Key(arch, "attention.layer_norm_rms_epsilon"), 1e-6));
  PETREL_ASSIGN_OR_RETURN(double base, file.GetFloatOr(Key(arch, "rope.freq_base"), 10000.0));
  PETREL_ASSIGN_OR_RETURN(uint64_t q_lora, file.GetUintOr(Key(arch, "attention.q_lora_rank"), 0));
  PETREL_ASSIGN_OR_RETURN(uint64_t kv_lora, file.GetUintOr(Key(arch, "attention.kv_lora_rank"), 0));
  PETREL_ASSIGN_OR_RETURN(uint64_t rope_dims, file.GetUint(Key(arch, "rope.dimension_count")));
  // Current files give the real head sizes under *_mla and the compressed cache's MQA view
  // (kv_lora + rope, kv_lora) under key_length/value_length; older ones only the real sizes.
  PETREL_ASSIGN_OR_RETURN(uint64_t key_length, file.GetUint(Key(arch, "attention.key_length")));
  PETREL_ASSIGN_OR_RETURN(uint64_t value_length, file.GetUint(Key(arch, "attention.value_length")));
  PETREL_ASSIGN_OR_RETURN(uint64_t key_mla,
                          file.GetUintOr(Key(arch, "attention.key_length_mla"), key_length));
  PETREL_ASSIGN_OR_RETURN(uint64_t value_mla,
                          file.GetUintOr(Key(arch, "attention.value_length_mla"), value_length));
  c.dim = Clamp(dim);
  c.n_layers = Clamp(n_layers);
  PETREL_RETURN_IF_ERROR(CheckBlockCount(c.n_layers, "key " + Key(arch, "block_count")));
  c.ffn_dim = Clamp(ffn);
  c.n_heads = Clamp(n_heads);
  c.n_kv_heads = 1;  // one latent row per token, shared by every head
  c.max_context = Clamp(ctx);
  c.norm_eps = float(eps);
  c.q_lora_rank = Clamp(q_lora);
  c.kv_lora_rank = Clamp(kv_lora);
  c.head_dim = Clamp(key_mla);
  c.v_head_dim = Clamp(value_mla);
  c.rope.dims = Clamp(rope_dims);
  c.qk_nope_dim = c.head_dim - c.rope.dims;
  c.rope.base = float(base);
  c.rope.style = arch.gguf_rope_style;
  PETREL_RETURN_IF_ERROR(CheckLatent(c, Key(arch, "attention.kv_lora_rank").c_str()));
  PETREL_ASSIGN_OR_RETURN(std::string_view scaling,
                          file.GetStringOr(Key(arch, "rope.scaling.type"), "none"));
  if (scaling == "yarn") {
    PETREL_ASSIGN_OR_RETURN(double factor, file.GetFloatOr(Key(arch, "rope.scaling.factor"), 1.0));
    PETREL_RETURN_IF_ERROR(
        ReadGgufYarn(file, arch, factor, Clamp(ctx), /*truncate=*/true, &c.rope));
    // llama.cpp's key scales the softmax here, not the rotation: the rotation's factor is
    // petrel's own key, written only when it is not 1.
    PETREL_ASSIGN_OR_RETURN(double kq_factor,
                            file.GetFloatOr(Key(arch, "rope.scaling.attn_factor"), 1.0));
    PETREL_ASSIGN_OR_RETURN(double rope_factor,
                            file.GetFloatOr(Key(arch, "rope.scaling.yarn_rope_factor"), 1.0));
    PETREL_ASSIGN_OR_RETURN(double log_multiplier,
                            file.GetFloatOr(Key(arch, "rope.scaling.yarn_log_multiplier"), 0.0));
    if (!(kq_factor > 0.0) || !std::isfinite(kq_factor) || !(rope_factor > 0.0) ||
        !std::isfinite(rope_factor)) {
      return Error("key %s: yarn attention factors %g and %g must be positive",
                   Key(arch, "rope.scaling.attn_factor").c_str(), kq_factor, rope_factor);
    }
    c.rope.attn_factor = float(rope_factor);
    PETREL_RETURN_IF_ERROR(SetYarnSoftmaxScale(
        log_multiplier, Key(arch, "rope.scaling.yarn_log_multiplier").c_str(), &c));
    c.attention_scale *= float(kq_factor * kq_factor);
  } else if (scaling != "none") {
    return Error("key %s: rope scaling '%.*s' is not supported for %s",
                 Key(arch, "rope.scaling.type").c_str(), int(scaling.size()), scaling.data(),
                 arch.gguf_name);
  }
  if (const GgufValue* tokens = file.Find("tokenizer.ggml.tokens")) {
    c.n_vocab = Clamp(tokens->count);
  } else if (const GgufTensorInfo* embd = file.FindTensor(arch.token_embd.gguf_name)) {
    c.n_vocab = embd->desc.ne[1];
  }
  c.tied_embeddings = file.FindTensor(arch.output.gguf_name) == nullptr;

  PETREL_ASSIGN_OR_RETURN(uint64_t n_experts, file.GetUintOr(Key(arch, "expert_count"), 0));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_used, file.GetUintOr(Key(arch, "expert_used_count"), 0));
  PETREL_ASSIGN_OR_RETURN(uint64_t expert_ffn,
                          file.GetUintOr(Key(arch, "expert_feed_forward_length"), ffn));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_dense,
                          file.GetUintOr(Key(arch, "leading_dense_block_count"), 0));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_shared, file.GetUintOr(Key(arch, "expert_shared_count"), 0));
  PETREL_ASSIGN_OR_RETURN(double scale, file.GetFloatOr(Key(arch, "expert_weights_scale"), 1.0));
  // llama.cpp's default for this family: not renormalised.
  PETREL_ASSIGN_OR_RETURN(bool norm, file.GetBoolOr(Key(arch, "expert_weights_norm"), false));
  // V2 files predate the key: softmax.
  PETREL_ASSIGN_OR_RETURN(uint64_t gating, file.GetUintOr(Key(arch, "expert_gating_func"), 1));
  PETREL_ASSIGN_OR_RETURN(uint64_t groups, file.GetUintOr(Key(arch, "expert_group_count"), 1));
  PETREL_ASSIGN_OR_RETURN(uint64_t groups_used,
                          file.GetUintOr(Key(arch, "expert_group_used_count"), groups));
  if (n_experts == 0) {
    return Error("key %s is missing or 0: a DeepSeek2 model needs experts",
                 Key(arch, "expert_count").c_str());
  }
  if (gating != 1 && gating != 2) {
    return Error("key %s: expert gating function %llu is not supported (1 softmax, 2 sigmoid)",
                 Key(arch, "expert_gating_func").c_str(), (unsigned long long)gating);
  }
  c.n_experts = Clamp(n_experts);
  c.n_experts_used = Clamp(n_used);
  c.expert_ffn_dim = Clamp(expert_ffn);
  c.n_dense_layers = Clamp(n_dense);
  c.n_shared_experts = Clamp(n_shared);
  c.expert_weights_scale = float(scale);
  c.expert_weights_norm = norm;
  c.expert_gating = gating == 2 ? MoeGating::kSigmoid : MoeGating::kSoftmax;
  c.n_expert_groups = Clamp(groups);
  c.n_expert_groups_used = Clamp(groups_used);
  // As HF: V3 (sigmoid) scores a group by its two best experts, V2 by its best.
  c.expert_group_score =
      c.expert_gating == MoeGating::kSigmoid ? MoeGroupScore::kTopTwoSum : MoeGroupScore::kMax;
  return c;
}

Result<ModelConfig> DeepSeek2ConfigFromHf(const nlohmann::json& json, const Architecture& arch) {
  ModelConfig c;
  c.architecture = arch.gguf_name;
  // V3 differs from V2 in its defaults and in when the scaling factor applies.
  const bool v3 = json.value("model_type", std::string()) == "deepseek_v3" ||
                  std::string(arch.hf_class) == "DeepseekV3ForCausalLM";
  PETREL_ASSIGN_OR_RETURN(c.dim, JsonInt(json, "hidden_size"));
  PETREL_ASSIGN_OR_RETURN(c.n_layers, JsonInt(json, "num_hidden_layers"));
  PETREL_RETURN_IF_ERROR(CheckBlockCount(c.n_layers, "config.json: field 'num_hidden_layers'"));
  PETREL_ASSIGN_OR_RETURN(c.ffn_dim, JsonInt(json, "intermediate_size"));
  PETREL_ASSIGN_OR_RETURN(c.n_heads, JsonInt(json, "num_attention_heads"));
  PETREL_ASSIGN_OR_RETURN(c.n_vocab, JsonInt(json, "vocab_size"));
  PETREL_ASSIGN_OR_RETURN(c.max_context, JsonIntOr(json, "max_position_embeddings", 2048));
  PETREL_ASSIGN_OR_RETURN(double eps, JsonNumberOr(json, "rms_norm_eps", 1e-6));
  PETREL_ASSIGN_OR_RETURN(double theta, JsonNumberOr(json, "rope_theta", 10000.0));
  c.norm_eps = float(eps);
  c.rope.base = float(theta);
  c.n_kv_heads = 1;
  PETREL_ASSIGN_OR_RETURN(c.q_lora_rank, JsonIntOr(json, "q_lora_rank", 0));
  PETREL_ASSIGN_OR_RETURN(c.kv_lora_rank, JsonIntOr(json, "kv_lora_rank", 0));
  PETREL_ASSIGN_OR_RETURN(c.qk_nope_dim, JsonInt(json, "qk_nope_head_dim"));
  PETREL_ASSIGN_OR_RETURN(c.rope.dims, JsonInt(json, "qk_rope_head_dim"));
  PETREL_ASSIGN_OR_RETURN(c.v_head_dim, JsonInt(json, "v_head_dim"));
  PETREL_RETURN_IF_ERROR(CheckLatent(c, "config.json: kv_lora_rank"));
  if (c.qk_nope_dim <= 0 || c.rope.dims <= 0) {
    return Error("config.json: qk_nope_head_dim %lld and qk_rope_head_dim %lld must be positive",
                 (long long)c.qk_nope_dim, (long long)c.rope.dims);
  }
  c.head_dim = c.qk_nope_dim + c.rope.dims;
  PETREL_ASSIGN_OR_RETURN(bool interleave, JsonBoolOr(json, "rope_interleave", true));
  c.rope.style = interleave ? RopeStyle::kInterleaved : RopeStyle::kHalfSplit;
  if (auto it = json.find("rope_scaling"); it != json.end() && !it->is_null()) {
    const std::string type =
        it->is_object() ? it->value("rope_type", it->value("type", std::string("?"))) : "?";
    if (type == "yarn") {
      PETREL_RETURN_IF_ERROR(ReadHfYarn(*it, c.max_context, &c.rope));
      const auto all_dim = it->find("mscale_all_dim");
      double mscale_all_dim = 0.0;
      if (all_dim != it->end() && !all_dim->is_null()) {
        if (!all_dim->is_number()) {
          return Error("config.json: rope_scaling field 'mscale_all_dim' must be a number");
        }
        mscale_all_dim = all_dim->get<double>();
      }
      PETREL_RETURN_IF_ERROR(SetYarnSoftmaxScale(
          0.1 * mscale_all_dim, "config.json: rope_scaling field 'mscale_all_dim'", &c));
    } else if (type != "default") {
      return Error("config.json: rope_scaling type '%s' is not supported for %s", type.c_str(),
                   arch.hf_class);
    }
  }
  PETREL_ASSIGN_OR_RETURN(bool attention_bias, JsonBoolOr(json, "attention_bias", false));
  if (attention_bias) return Error("config.json: attention_bias is not supported for %s", arch.hf_class);
  c.tied_embeddings = json.value("tie_word_embeddings", false);

  PETREL_ASSIGN_OR_RETURN(c.n_experts, JsonIntOr(json, "n_routed_experts", 0));
  if (c.n_experts <= 0) {
    return Error("config.json: n_routed_experts is missing or 0: a DeepSeek model needs experts");
  }
  PETREL_ASSIGN_OR_RETURN(c.n_experts_used, JsonInt(json, "num_experts_per_tok"));
  PETREL_ASSIGN_OR_RETURN(c.expert_ffn_dim, JsonInt(json, "moe_intermediate_size"));
  PETREL_ASSIGN_OR_RETURN(c.n_shared_experts, JsonIntOr(json, "n_shared_experts", 0));
  PETREL_ASSIGN_OR_RETURN(c.n_dense_layers, JsonIntOr(json, "first_k_dense_replace", 0));
  PETREL_ASSIGN_OR_RETURN(const int64_t layer_freq, JsonIntOr(json, "moe_layer_freq", 1));
  if (layer_freq != 1) {
    return Error("config.json: moe_layer_freq %lld is not supported (dense blocks among expert "
                 "blocks)", (long long)layer_freq);
  }
  PETREL_ASSIGN_OR_RETURN(c.expert_weights_norm, JsonBoolOr(json, "norm_topk_prob", v3));
  PETREL_ASSIGN_OR_RETURN(double scale, JsonNumberOr(json, "routed_scaling_factor", 1.0));
  // V2 scales only weights it does not renormalise; V3 scales always.
  c.expert_weights_scale = (v3 || !c.expert_weights_norm) ? float(scale) : 1.0f;
  const std::string scoring = json.value("scoring_func", std::string(v3 ? "sigmoid" : "softmax"));
  if (scoring == "sigmoid") {
    c.expert_gating = MoeGating::kSigmoid;
  } else if (scoring == "softmax") {
    c.expert_gating = MoeGating::kSoftmax;
  } else {
    return Error("config.json: scoring_func '%s' is not supported", scoring.c_str());
  }
  const std::string method = json.value("topk_method", std::string(v3 ? "noaux_tc" : "greedy"));
  PETREL_ASSIGN_OR_RETURN(c.n_expert_groups, JsonIntOr(json, "n_group", 1));
  PETREL_ASSIGN_OR_RETURN(c.n_expert_groups_used, JsonIntOr(json, "topk_group", c.n_expert_groups));
  if (method == "noaux_tc") {
    c.expert_group_score = MoeGroupScore::kTopTwoSum;
    if (c.expert_gating != MoeGating::kSigmoid) {
      return Error("config.json: topk_method noaux_tc needs scoring_func sigmoid");
    }
  } else if (method == "group_limited_greedy") {
    c.expert_group_score = MoeGroupScore::kMax;
  } else if (method == "greedy") {
    c.n_expert_groups = c.n_expert_groups_used = 1;  // no group limit
  } else {
    return Error("config.json: topk_method '%s' is not supported", method.c_str());
  }
  return c;
}

void DeepSeek2ConfigToGguf(const ModelConfig& c, const Architecture& arch, GgufWriter* writer) {
  const std::string a = arch.gguf_name;
  writer->SetU32(a + ".context_length", uint32_t(c.max_context));
  writer->SetU32(a + ".embedding_length", uint32_t(c.dim));
  writer->SetU32(a + ".block_count", uint32_t(c.n_layers));
  writer->SetU32(a + ".feed_forward_length", uint32_t(c.ffn_dim));
  writer->SetU32(a + ".attention.head_count", uint32_t(c.n_heads));
  writer->SetU32(a + ".attention.head_count_kv", 1);
  writer->SetF32(a + ".attention.layer_norm_rms_epsilon", c.norm_eps);
  writer->SetF32(a + ".rope.freq_base", c.rope.base);
  writer->SetU32(a + ".rope.dimension_count", uint32_t(c.rope.dims));
  writer->SetU32(a + ".vocab_size", uint32_t(c.n_vocab));
  if (c.q_lora_rank > 0) writer->SetU32(a + ".attention.q_lora_rank", uint32_t(c.q_lora_rank));
  writer->SetU32(a + ".attention.kv_lora_rank", uint32_t(c.kv_lora_rank));
  writer->SetU32(a + ".attention.key_length", uint32_t(c.kv_lora_rank + c.rope.dims));
  writer->SetU32(a + ".attention.value_length", uint32_t(c.kv_lora_rank));
  writer->SetU32(a + ".attention.key_length_mla", uint32_t(c.head_dim));
  writer->SetU32(a + ".attention.value_length_mla", uint32_t(c.v_head_dim));
  writer->SetU32(a + ".expert_count", uint32_t(c.n_experts));
  writer->SetU32(a + ".expert_used_count", uint32_t(c.n_experts_used));
  writer->SetU32(a + ".expert_feed_forward_length", uint32_t(c.expert_ffn_dim));
  writer->SetU32(a + ".expert_shared_count", uint32_t(c.n_shared_experts));
  writer->SetU32(a + ".leading_dense_block_count", uint32_t(c.n_dense_layers));
  writer->SetF32(a + ".expert_weights_scale", c.expert_weights_scale);
  writer->SetBool(a + ".expert_weights_norm", c.expert_weights_norm);
  writer->SetU32(a + ".expert_gating_func", c.expert_gating == MoeGating::kSigmoid ? 2 : 1);
  writer->SetU32(a + ".expert_group_count", uint32_t(c.n_expert_groups));
  writer->SetU32(a + ".expert_group_used_count", uint32_t(c.n_expert_groups_used));
  if (c.rope.scaling == RopeScalingKind::kYarn) {
    writer->SetString(a + ".rope.scaling.type", "yarn");
    writer->SetF32(a + ".rope.scaling.factor", c.rope.factor);
    writer->SetU32(a + ".rope.scaling.original_context_length", uint32_t(c.rope.original_context));
    writer->SetF32(a + ".rope.scaling.yarn_beta_fast", c.rope.beta_fast);
    writer->SetF32(a + ".rope.scaling.yarn_beta_slow", c.rope.beta_slow);
    if (!c.rope.yarn_truncate) writer->SetBool(a + ".rope.scaling.yarn_truncate", false);
    if (c.rope.attn_factor != 1.0f) {
      writer->SetF32(a + ".rope.scaling.yarn_rope_factor", c.rope.attn_factor);
    }
    // The softmax's m back from the scale (SetYarnSoftmaxScale).
    const double m = std::sqrt(double(c.attention_scale) * std::sqrt(double(c.head_dim)));
    const double log_factor = std::log(double(c.rope.factor));
    if (log_factor > 0.0) {
      writer->SetF32(a + ".rope.scaling.yarn_log_multiplier", float((m - 1.0) / log_factor));
    }
  }
}

BlockViews DeepSeek2BlockViews(const LayerWeights& L) {
  BlockViews b;
  b.attn_norm = &L[kAttnNorm];
  b.wq = &L[kWq];
  b.wq_a = &L[kWqA];
  b.q_a_norm = &L[kQANorm];
  b.wq_b = &L[kWqB];
  b.wkv_a_latent = &L[kWkvALatent];
  b.wkv_a_rope = &L[kWkvARope];
  b.kv_a_norm = &L[kKvANorm];
  b.wk_b = &L[kWkB];
  b.wv_b = &L[kWvB];
  b.wo = &L[kWo];
  b.ffn_norm = &L[kFfnNorm];
  b.ffn_gate = &L[kWGate];
  b.ffn_up = &L[kWUp];
  b.ffn_down = &L[kWDown];
  b.ffn_router = &L[kRouter];
  b.ffn_select_bias = &L[kRouterBias];
  b.ffn_gate_exps = &L[kGateExps];
  b.ffn_up_exps = &L[kUpExps];
  b.ffn_down_exps = &L[kDownExps];
  b.ffn_gate_shexp = &L[kGateShexp];
  b.ffn_up_shexp = &L[kUpShexp];
  b.ffn_down_shexp = &L[kDownShexp];
  return b;
}

void BuildDeepSeek2Graph(const ModelConfig& c, const ModelWeights& w, size_t n_tokens,
                         size_t n_selected, Graph* g) {
  BuildDecoderGraph({&DeepSeek2BlockViews, FfnActivation::kSilu}, c, w, n_tokens, n_selected, g);
}

}  // namespace

extern constinit const ArchitectureFamily kDeepSeek2Family = {
    "model.layers.",
    kDeepSeek2LayerWeights,
    decoder_weights::kTokenEmbd,
    decoder_weights::kOutputNorm,
    decoder_weights::kOutput,
    &DeepSeek2ConfigFromGguf,
    &DeepSeek2ConfigFromHf,
    &DeepSeek2ConfigToGguf,
    &BuildDeepSeek2Graph,
};

}  // namespace petrel
