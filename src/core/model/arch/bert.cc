// The BERT family (GGUF arch `bert`, HF `BertModel`): a post-norm encoder. The input is the
// token's embedding plus its learned absolute position's and token type 0's, LayerNormed; each
// block is a = LN(x + Wo·Attn(x)), x' = LN(a + Wdown·gelu(Wup·a)), every projection with a bias,
// attention bidirectional (every token sees its whole sequence) and no RoPE, GELU in the exact
// erf form (Hugging Face's "gelu"; llama.cpp uses the tanh form). There is no output head: the
// graph ends at the last block's hidden states, which the embedding code pools per sequence.
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "core/format/gguf.h"
#include "core/model/arch/config_fields.h"
#include "core/format/gguf_writer.h"
#include "core/model/architecture.h"

namespace petrel {
namespace {

enum BertWeight : size_t {
  kWq,
  kBq,
  kWk,
  kBk,
  kWv,
  kBv,
  kWo,
  kBo,
  kAttnOutNorm,
  kAttnOutNormBias,
  kWUp,
  kBUp,
  kWDown,
  kBDown,
  kLayerOutNorm,
  kLayerOutNormBias,
  kBertWeightCount
};

// The weights read with the embedding (ModelWeights::input).
enum BertInputWeight : size_t {
  kPositionEmbd,
  kTokenTypes,
  kEmbdNorm,
  kEmbdNormBias,
  kBertInputWeightCount
};

using Config = const ModelConfig&;
WeightShape Dim(Config c) { return {c.dim, 1}; }
WeightShape Ffn(Config c) { return {c.ffn_dim, 1}; }
WeightShape DimToDim(Config c) { return {c.dim, c.dim}; }
WeightShape DimToFfn(Config c) { return {c.dim, c.ffn_dim}; }
WeightShape FfnToDim(Config c) { return {c.ffn_dim, c.dim}; }
WeightShape DimToVocab(Config c) { return {c.dim, c.n_vocab}; }
WeightShape DimToPositions(Config c) { return {c.dim, c.n_positions}; }
WeightShape DimToTokenTypes(Config c) { return {c.dim, c.n_token_types}; }
bool Never(Config) { return false; }

constexpr WeightKind kMatrix = WeightKind::kMatrix;
constexpr WeightKind kVector = WeightKind::kVector;

constexpr std::array<WeightSpec, kBertWeightCount> BertLayerWeights() {
  std::array<WeightSpec, kBertWeightCount> w{};
  w[kWq] = {"attn_q.weight", "attention.self.query.weight", kMatrix, &DimToDim};
  w[kBq] = {"attn_q.bias", "attention.self.query.bias", kVector, &Dim};
  w[kWk] = {"attn_k.weight", "attention.self.key.weight", kMatrix, &DimToDim};
  w[kBk] = {"attn_k.bias", "attention.self.key.bias", kVector, &Dim};
  w[kWv] = {"attn_v.weight", "attention.self.value.weight", kMatrix, &DimToDim};
  w[kBv] = {"attn_v.bias", "attention.self.value.bias", kVector, &Dim};
  w[kWo] = {"attn_output.weight", "attention.output.dense.weight", kMatrix, &DimToDim};
  w[kBo] = {"attn_output.bias", "attention.output.dense.bias", kVector, &Dim};
  w[kAttnOutNorm] = {"attn_output_norm.weight", "attention.output.LayerNorm.weight", kVector, &Dim};
  w[kAttnOutNormBias] = {"attn_output_norm.bias", "attention.output.LayerNorm.bias", kVector, &Dim};
  w[kWUp] = {"ffn_up.weight", "intermediate.dense.weight", kMatrix, &DimToFfn};
  w[kBUp] = {"ffn_up.bias", "intermediate.dense.bias", kVector, &Ffn};
  w[kWDown] = {"ffn_down.weight", "output.dense.weight", kMatrix, &FfnToDim};
  w[kBDown] = {"ffn_down.bias", "output.dense.bias", kVector, &Dim};
  w[kLayerOutNorm] = {"layer_output_norm.weight", "output.LayerNorm.weight", kVector, &Dim};
  w[kLayerOutNormBias] = {"layer_output_norm.bias", "output.LayerNorm.bias", kVector, &Dim};
  return w;
}

constexpr std::array<WeightSpec, kBertInputWeightCount> BertInputWeights() {
  std::array<WeightSpec, kBertInputWeightCount> w{};
  w[kPositionEmbd] = {"position_embd.weight", "embeddings.position_embeddings.weight", kMatrix,
                      &DimToPositions};
  w[kTokenTypes] = {"token_types.weight", "embeddings.token_type_embeddings.weight", kMatrix,
                    &DimToTokenTypes};
  w[kEmbdNorm] = {"token_embd_norm.weight", "embeddings.LayerNorm.weight", kVector, &Dim};
  w[kEmbdNormBias] = {"token_embd_norm.bias", "embeddings.LayerNorm.bias", kVector, &Dim};
  return w;
}

constexpr std::array<WeightSpec, kBertWeightCount> kBertLayerWeights = BertLayerWeights();
constexpr std::array<WeightSpec, kBertInputWeightCount> kBertInputWeights = BertInputWeights();
static_assert(AllSpecsSet(kBertLayerWeights), "every BertWeight needs its row");
static_assert(AllSpecsSet(kBertInputWeights), "every BertInputWeight needs its row");

std::string Key(const Architecture& arch, const char* suffix) {
  return std::string(arch.gguf_name) + "." + suffix;
}

int64_t Clamp(uint64_t v) { return int64_t(v > (uint64_t(1) << 40) ? (uint64_t(1) << 40) : v); }

// What every BERT config shares once the sizes are read: one KV head per head, heads that
// split the hidden size, positions from the table (RoPE fields are set only to pass checks).
Status FinishConfig(ModelConfig* c) {
  if (c->n_heads > 0 && c->dim % c->n_heads != 0) {
    return Error("hidden size %lld is not a multiple of the %lld heads", (long long)c->dim,
                 (long long)c->n_heads);
  }
  c->n_kv_heads = c->n_heads;
  c->head_dim = c->n_heads > 0 ? c->dim / c->n_heads : 0;
  c->rope.dims = c->head_dim;
  c->max_context = c->n_positions;
  c->embeddings_only = true;
  c->qkv_bias = true;
  if (c->n_token_types <= 0 || c->n_token_types > (int64_t(1) << 20)) {
    return Error("token type count %lld is invalid (BERT adds the row of type 0)",
                 (long long)c->n_token_types);
  }
  return Status::Ok();
}

Result<ModelConfig> BertConfigFromGguf(const GgufFile& file, const Architecture& arch) {
  ModelConfig c;
  c.architecture = arch.gguf_name;
  PETREL_ASSIGN_OR_RETURN(uint64_t dim, file.GetUint(Key(arch, "embedding_length")));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_layers, file.GetUint(Key(arch, "block_count")));
  PETREL_ASSIGN_OR_RETURN(uint64_t ffn, file.GetUint(Key(arch, "feed_forward_length")));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_heads, file.GetUint(Key(arch, "attention.head_count")));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_positions, file.GetUint(Key(arch, "context_length")));
  PETREL_ASSIGN_OR_RETURN(double eps,
                          file.GetFloatOr(Key(arch, "attention.layer_norm_epsilon"), 1e-12));
  PETREL_ASSIGN_OR_RETURN(bool causal, file.GetBoolOr(Key(arch, "attention.causal"), false));
  PETREL_ASSIGN_OR_RETURN(uint64_t types, file.GetUintOr("tokenizer.ggml.token_type_count", 2));
  c.dim = Clamp(dim);
  c.n_layers = Clamp(n_layers);
  PETREL_RETURN_IF_ERROR(CheckBlockCount(c.n_layers, "key " + Key(arch, "block_count")));
  c.ffn_dim = Clamp(ffn);
  c.n_heads = Clamp(n_heads);
  c.n_positions = Clamp(n_positions);
  c.n_token_types = Clamp(types);
  c.norm_eps = float(eps);
  c.causal_attention = causal;
  if (file.Find(Key(arch, "pooling_type"))) {
    PETREL_ASSIGN_OR_RETURN(uint64_t pooling, file.GetUint(Key(arch, "pooling_type")));
    auto kind = PoolingFromGguf(pooling);
    if (!kind.ok()) return kind.status().Wrap("key " + Key(arch, "pooling_type"));
    c.pooling = *kind;
  }
  if (const GgufValue* tokens = file.Find("tokenizer.ggml.tokens")) {
    c.n_vocab = Clamp(tokens->count);
  } else if (const GgufTensorInfo* embd = file.FindTensor(arch.token_embd.gguf_name)) {
    c.n_vocab = embd->desc.ne[1];
  }
  PETREL_RETURN_IF_ERROR(FinishConfig(&c));
  return c;
}

Result<ModelConfig> BertConfigFromHf(const nlohmann::json& json, const Architecture& arch) {
  ModelConfig c;
  c.architecture = arch.gguf_name;
  PETREL_ASSIGN_OR_RETURN(c.dim, JsonInt(json, "hidden_size"));
  PETREL_ASSIGN_OR_RETURN(c.n_layers, JsonInt(json, "num_hidden_layers"));
  PETREL_RETURN_IF_ERROR(CheckBlockCount(c.n_layers, "config.json: field 'num_hidden_layers'"));
  PETREL_ASSIGN_OR_RETURN(c.ffn_dim, JsonInt(json, "intermediate_size"));
  PETREL_ASSIGN_OR_RETURN(c.n_heads, JsonInt(json, "num_attention_heads"));
  PETREL_ASSIGN_OR_RETURN(c.n_vocab, JsonInt(json, "vocab_size"));
  PETREL_ASSIGN_OR_RETURN(c.n_positions, JsonInt(json, "max_position_embeddings"));
  c.n_token_types = 2;
  if (json.contains("type_vocab_size")) {
    PETREL_ASSIGN_OR_RETURN(c.n_token_types, JsonInt(json, "type_vocab_size"));
  }
  double eps = 1e-12;
  if (auto it = json.find("layer_norm_eps"); it != json.end() && !it->is_null()) {
    if (!it->is_number()) return Error("config.json: field 'layer_norm_eps' must be a number");
    eps = it->get<double>();
  }
  c.norm_eps = float(eps);
  // Only the exact GELU has a kernel; the tanh forms would differ by ~1e-4 and are refused.
  PETREL_ASSIGN_OR_RETURN(const std::string act, JsonStringOr(json, "hidden_act", "gelu"));
  if (act != "gelu") {
    return Error("config.json: hidden_act '%s' is not supported (gelu, the erf form)", act.c_str());
  }
  PETREL_ASSIGN_OR_RETURN(const std::string positions,
                          JsonStringOr(json, "position_embedding_type", "absolute"));
  if (positions != "absolute") {
    return Error("config.json: position_embedding_type '%s' is not supported (absolute)",
                 positions.c_str());
  }
  // BertModel with is_decoder masks attention causally.
  if (auto it = json.find("is_decoder"); it != json.end() && !it->is_null()) {
    if (!it->is_boolean()) return Error("config.json: field 'is_decoder' must be a boolean");
    c.causal_attention = it->get<bool>();
  } else {
    c.causal_attention = false;
  }
  PETREL_RETURN_IF_ERROR(FinishConfig(&c));
  return c;
}

void BertConfigToGguf(const ModelConfig& c, const Architecture& arch, GgufWriter* writer) {
  const std::string a = arch.gguf_name;
  writer->SetU32(a + ".context_length", uint32_t(c.n_positions));
  writer->SetU32(a + ".embedding_length", uint32_t(c.dim));
  writer->SetU32(a + ".block_count", uint32_t(c.n_layers));
  writer->SetU32(a + ".feed_forward_length", uint32_t(c.ffn_dim));
  writer->SetU32(a + ".attention.head_count", uint32_t(c.n_heads));
  writer->SetF32(a + ".attention.layer_norm_epsilon", c.norm_eps);
  writer->SetBool(a + ".attention.causal", c.causal_attention);
  writer->SetU32("tokenizer.ggml.token_type_count", uint32_t(c.n_token_types));
  const PoolingKind pooling = c.pooling;
  if (pooling != PoolingKind::kUnset) {
    const uint32_t number = pooling == PoolingKind::kMean   ? 1
                            : pooling == PoolingKind::kCls  ? 2
                            : pooling == PoolingKind::kLast ? 3
                                                            : 0;
    writer->SetU32(a + ".pooling_type", number);
  }
}

void BuildBertGraph(const ModelConfig& c, const ModelWeights& w, size_t n_tokens, size_t n_selected,
                    Graph* g) {
  auto rows_of = [&](ValueId v) { return g->values[size_t(v)].rows; };
  auto mat_mul = [&](int layer, ValueId x, const TensorView& weight, const TensorView& bias) {
    Node node{OpKind::kMatMul, layer, {x}};
    node.weight = &weight;
    node.bias = bias.data ? &bias : nullptr;
    return g->Add(node, rows_of(x), weight.desc.ne[1]);
  };
  auto layer_norm = [&](int layer, ValueId x, const TensorView& weight, const TensorView& bias) {
    Node node{OpKind::kLayerNorm, layer, {x}};
    node.weight = &weight;
    node.bias = bias.data ? &bias : nullptr;
    node.norm.eps = c.norm_eps;
    return g->Add(node, rows_of(x), c.dim);
  };
  auto add = [&](int layer, ValueId a, ValueId b) {
    return g->Add(Node{OpKind::kAdd, layer, {a, b}}, rows_of(a), c.dim);
  };
  auto add_rows = [&](ValueId x, const TensorView& table, bool by_position) {
    Node node{OpKind::kAddRows, kEmbeddingLayer, {x}};
    node.weight = &table;
    node.add_rows.by_position = by_position;
    node.add_rows.row = 0;  // token type 0: single segments
    return g->Add(node, rows_of(x), c.dim);
  };

  Node embed{OpKind::kEmbed, kEmbeddingLayer};
  embed.weight = &w.token_embd;
  ValueId x = g->Add(embed, int64_t(n_tokens), c.dim);
  x = add_rows(x, w.input[kPositionEmbd], true);
  x = add_rows(x, w.input[kTokenTypes], false);
  x = layer_norm(kEmbeddingLayer, x, w.input[kEmbdNorm], w.input[kEmbdNormBias]);
  for (int l = 0; l < int(c.n_layers); ++l) {
    const LayerWeights& L = w.layers[size_t(l)];
    const ValueId q = mat_mul(l, x, L[kWq], L[kBq]);
    const ValueId k = mat_mul(l, x, L[kWk], L[kBk]);
    const ValueId v = mat_mul(l, x, L[kWv], L[kBv]);
    Node attention{OpKind::kAttention, l, {q, k, v}};
    AttentionParams& p = attention.attention;
    p.n_heads = p.n_kv_heads = int32_t(c.n_heads);
    p.head_dim = int32_t(c.head_dim);
    p.scale = 1.0f / std::sqrt(float(c.head_dim));
    p.causal = c.causal_attention;
    const ValueId attn = g->Add(attention, rows_of(q), c.dim);
    const ValueId a = layer_norm(l, add(l, x, mat_mul(l, attn, L[kWo], L[kBo])), L[kAttnOutNorm],
                                 L[kAttnOutNormBias]);
    const ValueId up = mat_mul(l, a, L[kWUp], L[kBUp]);
    const ValueId act = g->Add(Node{OpKind::kGelu, l, {up}}, rows_of(up), c.ffn_dim);
    x = layer_norm(l, add(l, a, mat_mul(l, act, L[kWDown], L[kBDown])), L[kLayerOutNorm],
                   L[kLayerOutNormBias]);
  }
  // No output head: the selected rows' hidden states are the output.
  g->logits = g->Add(Node{OpKind::kGetRows, int(c.n_layers), {x}}, int64_t(n_selected), c.dim);
}

}  // namespace

extern constinit const ArchitectureFamily kBertFamily = {
    "encoder.layer.",
    kBertLayerWeights,
    {"token_embd.weight", "embeddings.word_embeddings.weight", kMatrix, &DimToVocab},
    // No final norm and no output head (the HF pooler is not part of the embedding).
    {"output_norm.weight", "final_layer_norm.weight", kVector, &Dim, &Never},
    {"output.weight", "lm_head.weight", kMatrix, &DimToVocab, &Never},
    &BertConfigFromGguf,
    &BertConfigFromHf,
    &BertConfigToGguf,
    &BuildBertGraph,
    kBertInputWeights,
};

}  // namespace petrel
