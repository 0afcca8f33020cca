// The Llama family: reads hyperparameters, binds tensors by name and shape, builds the graph.
// The forward pass, per block: x += Wo·Attn(RoPE(Wq·n1), RoPE(Wk·n1), Wv·n1);
// x += Wdown·(silu(Wgate·n2) ⊙ Wup·n2), with n1, n2 the RMS-normed x.
#include "core/model/arch/llama.h"

#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "core/format/gguf.h"

namespace petrel {
namespace {

std::string Key(const Architecture& arch, const char* suffix) {
  return std::string(arch.gguf_name) + "." + suffix;
}

Result<int64_t> JsonInt(const nlohmann::json& config, const char* field) {
  auto it = config.find(field);
  if (it == config.end()) return Error("config.json: field '%s' is missing", field);
  if (!it->is_number_integer()) return Error("config.json: field '%s' must be an integer", field);
  return it->get<int64_t>();
}

Result<double> JsonNumberOr(const nlohmann::json& config, const char* field, double fallback) {
  auto it = config.find(field);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_number()) return Error("config.json: field '%s' must be a number", field);
  return it->get<double>();
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
  c.ffn_dim = clamp(ffn);
  c.n_heads = clamp(n_heads);
  c.n_kv_heads = clamp(n_kv);
  c.max_context = clamp(ctx);
  c.norm_eps = float(eps);
  c.head_dim = c.n_heads > 0 ? c.dim / c.n_heads : 0;
  PETREL_ASSIGN_OR_RETURN(uint64_t key_length, file.GetUintOr(Key(arch, "attention.key_length"), uint64_t(c.head_dim)));
  c.head_dim = clamp(key_length);
  PETREL_ASSIGN_OR_RETURN(uint64_t rope_dims, file.GetUintOr(Key(arch, "rope.dimension_count"), uint64_t(c.head_dim)));
  c.rope.dims = clamp(rope_dims);
  c.rope.base = float(base);
  c.rope.style = arch.gguf_rope_style;
  PETREL_ASSIGN_OR_RETURN(std::string_view scaling, file.GetStringOr(Key(arch, "rope.scaling.type"), "none"));
  PETREL_ASSIGN_OR_RETURN(double factor, file.GetFloatOr(Key(arch, "rope.scaling.factor"), 1.0));
  if (scaling == "linear" && factor != 1.0) {
    c.rope.scaling = RopeScalingKind::kLinear;
    c.rope.factor = float(factor);
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
  c.qkv_bias = arch.qkv_bias;
  // The vocabulary size comes from the token list; the weights are checked against it later.
  if (const GgufValue* tokens = file.Find("tokenizer.ggml.tokens")) {
    c.n_vocab = clamp(tokens->count);
  } else if (const GgufTensorInfo* embd = file.FindTensor("token_embd.weight")) {
    c.n_vocab = embd->desc.ne[1];
  }
  c.tied_embeddings = file.FindTensor("output.weight") == nullptr;
  return c;
}

Result<ModelConfig> LlamaConfigFromHf(const nlohmann::json& json, const Architecture& arch) {
  ModelConfig c;
  c.architecture = arch.gguf_name;
  PETREL_ASSIGN_OR_RETURN(c.dim, JsonInt(json, "hidden_size"));
  PETREL_ASSIGN_OR_RETURN(c.n_layers, JsonInt(json, "num_hidden_layers"));
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
    } else if (type != "default") {
      return Error("config.json: rope_scaling type '%s' is not supported", type.c_str());
    }
  } else if (it != json.end() && !it->is_null()) {
    return Error("config.json: field 'rope_scaling' must be an object or null");
  }
  c.tied_embeddings = json.value("tie_word_embeddings", false);
  c.qkv_bias = arch.qkv_bias || json.value("attention_bias", false);
  c.output_proj_bias = false;
  return c;
}

namespace {

// Looks up one tensor by its GGUF and HF names and checks its shape.
class Binder {
 public:
  Binder(WeightSource& source) : source_(source) {}

  Status Matrix(const std::string& gguf, const std::string& hf, int64_t n_in, int64_t n_out,
                TensorView* out) {
    const TensorView* view = source_.Find(gguf, hf);
    if (!view) return Error("%s: tensor %s is missing", source_.Describe().c_str(), gguf.c_str());
    if (view->desc.n_dims != 2 || view->desc.ne[0] != n_in || view->desc.ne[1] != n_out) {
      return Error("%s: tensor %s has shape %s, expected [%lld, %lld]", source_.Describe().c_str(),
                   gguf.c_str(), view->desc.ShapeString().c_str(), (long long)n_in, (long long)n_out);
    }
    *out = *view;
    return Status::Ok();
  }

  Status Vector(const std::string& gguf, const std::string& hf, int64_t n, bool required,
                TensorView* out) {
    const TensorView* view = source_.Find(gguf, hf);
    if (!view) {
      if (required) return Error("%s: tensor %s is missing", source_.Describe().c_str(), gguf.c_str());
      *out = TensorView{};
      return Status::Ok();
    }
    if (view->desc.n_elems() != n || view->desc.ne[0] != n) {
      return Error("%s: tensor %s has shape %s, expected [%lld]", source_.Describe().c_str(),
                   gguf.c_str(), view->desc.ShapeString().c_str(), (long long)n);
    }
    PETREL_ASSIGN_OR_RETURN(*out, source_.ToF32(*view));
    return Status::Ok();
  }

 private:
  WeightSource& source_;
};

std::string Blk(int layer, const char* name) { return "blk." + std::to_string(layer) + "." + name; }
std::string HfLayer(int layer, const char* name) {
  return "model.layers." + std::to_string(layer) + "." + name;
}

}  // namespace

Status BindLlamaWeights(const ModelConfig& c, WeightSource& source, ModelWeights* w) {
  Binder bind(source);
  // Tied checkpoints may store the matrix under either name (the story model keeps only
  // `lm_head.weight`), so look for the embedding under both.
  Status embd = bind.Matrix("token_embd.weight", "model.embed_tokens.weight", c.dim, c.n_vocab, &w->token_embd);
  if (!embd.ok()) {
    if (!c.tied_embeddings || !bind.Matrix("output.weight", "lm_head.weight", c.dim, c.n_vocab, &w->token_embd).ok()) {
      return embd;
    }
  }
  if (c.tied_embeddings) {
    Status out = bind.Matrix("output.weight", "lm_head.weight", c.dim, c.n_vocab, &w->output);
    if (!out.ok()) w->output = w->token_embd;
  } else {
    PETREL_RETURN_IF_ERROR(bind.Matrix("output.weight", "lm_head.weight", c.dim, c.n_vocab, &w->output));
  }
  PETREL_RETURN_IF_ERROR(bind.Vector("output_norm.weight", "model.norm.weight", c.dim, true, &w->output_norm));
  w->layers.resize(size_t(c.n_layers));
  for (int l = 0; l < int(c.n_layers); ++l) {
    LayerWeights& L = w->layers[size_t(l)];
    PETREL_RETURN_IF_ERROR(bind.Vector(Blk(l, "attn_norm.weight"), HfLayer(l, "input_layernorm.weight"), c.dim, true, &L.attn_norm));
    PETREL_RETURN_IF_ERROR(bind.Matrix(Blk(l, "attn_q.weight"), HfLayer(l, "self_attn.q_proj.weight"), c.dim, c.q_dim(), &L.wq));
    PETREL_RETURN_IF_ERROR(bind.Matrix(Blk(l, "attn_k.weight"), HfLayer(l, "self_attn.k_proj.weight"), c.dim, c.kv_dim(), &L.wk));
    PETREL_RETURN_IF_ERROR(bind.Matrix(Blk(l, "attn_v.weight"), HfLayer(l, "self_attn.v_proj.weight"), c.dim, c.kv_dim(), &L.wv));
    PETREL_RETURN_IF_ERROR(bind.Matrix(Blk(l, "attn_output.weight"), HfLayer(l, "self_attn.o_proj.weight"), c.q_dim(), c.dim, &L.wo));
    PETREL_RETURN_IF_ERROR(bind.Vector(Blk(l, "attn_q.bias"), HfLayer(l, "self_attn.q_proj.bias"), c.q_dim(), c.qkv_bias, &L.bq));
    PETREL_RETURN_IF_ERROR(bind.Vector(Blk(l, "attn_k.bias"), HfLayer(l, "self_attn.k_proj.bias"), c.kv_dim(), c.qkv_bias, &L.bk));
    PETREL_RETURN_IF_ERROR(bind.Vector(Blk(l, "attn_v.bias"), HfLayer(l, "self_attn.v_proj.bias"), c.kv_dim(), c.qkv_bias, &L.bv));
    PETREL_RETURN_IF_ERROR(bind.Vector(Blk(l, "ffn_norm.weight"), HfLayer(l, "post_attention_layernorm.weight"), c.dim, true, &L.ffn_norm));
    PETREL_RETURN_IF_ERROR(bind.Matrix(Blk(l, "ffn_gate.weight"), HfLayer(l, "mlp.gate_proj.weight"), c.dim, c.ffn_dim, &L.w_gate));
    PETREL_RETURN_IF_ERROR(bind.Matrix(Blk(l, "ffn_up.weight"), HfLayer(l, "mlp.up_proj.weight"), c.dim, c.ffn_dim, &L.w_up));
    PETREL_RETURN_IF_ERROR(bind.Matrix(Blk(l, "ffn_down.weight"), HfLayer(l, "mlp.down_proj.weight"), c.ffn_dim, c.dim, &L.w_down));
  }
  return Status::Ok();
}

void BuildLlamaGraph(const ModelConfig& c, const ModelWeights& w, size_t n_tokens,
                     size_t n_selected, Graph* g) {
  const int64_t n = int64_t(n_tokens);
  auto mat_mul = [&](int layer, ValueId x, const TensorView& weight, const TensorView* bias) {
    Node node{OpKind::kMatMul, layer, {x}};
    node.weight = &weight;
    node.bias = bias && bias->data ? bias : nullptr;
    return g->Add(node, n_tokens == 0 ? 0 : g->values[size_t(x)].rows, weight.desc.ne[1]);
  };
  auto rms_norm = [&](int layer, ValueId x, const TensorView& weight) {
    Node node{OpKind::kRmsNorm, layer, {x}};
    node.weight = &weight;
    node.norm.eps = c.norm_eps;
    return g->Add(node, g->values[size_t(x)].rows, g->values[size_t(x)].cols);
  };
  auto binary = [&](OpKind op, int layer, ValueId a, ValueId b) {
    return g->Add(Node{op, layer, {a, b}}, g->values[size_t(a)].rows, g->values[size_t(a)].cols);
  };

  RopeParams rope_params;
  rope_params.n_heads = int32_t(c.n_heads);
  rope_params.n_kv_heads = int32_t(c.n_kv_heads);
  rope_params.head_dim = int32_t(c.head_dim);
  rope_params.rot_dims = int32_t(c.rope.dims);
  rope_params.style = c.rope.style;
  rope_params.inv_freq = w.rope_inv_freq.data();
  AttentionParams attention_params;
  attention_params.n_heads = int32_t(c.n_heads);
  attention_params.n_kv_heads = int32_t(c.n_kv_heads);
  attention_params.head_dim = int32_t(c.head_dim);
  attention_params.scale = 1.0f / std::sqrt(float(c.head_dim));

  Node embed{OpKind::kEmbed, kEmbeddingLayer};
  embed.weight = &w.token_embd;
  ValueId x = g->Add(embed, n, c.dim);
  for (int l = 0; l < int(c.n_layers); ++l) {
    const LayerWeights& L = w.layers[size_t(l)];
    const ValueId h = rms_norm(l, x, L.attn_norm);
    const ValueId q = mat_mul(l, h, L.wq, &L.bq);
    const ValueId k = mat_mul(l, h, L.wk, &L.bk);
    const ValueId v = mat_mul(l, h, L.wv, &L.bv);
    Node rope{OpKind::kRope, l, {q, k}};  // in place, no output value
    rope.rope = rope_params;
    g->nodes.push_back(rope);
    Node attention{OpKind::kAttention, l, {q, k, v}};
    attention.attention = attention_params;
    const ValueId attn = g->Add(attention, n, c.q_dim());
    x = binary(OpKind::kAdd, l, x, mat_mul(l, attn, L.wo, nullptr));
    const ValueId h2 = rms_norm(l, x, L.ffn_norm);
    ValueId act;
    if (L.w_gate.desc.dtype == L.w_up.desc.dtype) {  // one activation type for both
      Node ffn{OpKind::kGatedFfn, l, {h2}};
      ffn.weight = &L.w_gate;
      ffn.weight_up = &L.w_up;
      act = g->Add(ffn, g->values[size_t(h2)].rows, L.w_gate.desc.ne[1]);
    } else {
      act = binary(OpKind::kSiluMul, l, mat_mul(l, h2, L.w_gate, nullptr),
                   mat_mul(l, h2, L.w_up, nullptr));
    }
    x = binary(OpKind::kAdd, l, x, mat_mul(l, act, L.w_down, nullptr));
  }
  const int head = int(c.n_layers);
  const ValueId selected = g->Add(Node{OpKind::kGetRows, head, {x}}, int64_t(n_selected), c.dim);
  const ValueId normed = rms_norm(head, selected, w.output_norm);
  g->logits = mat_mul(head, normed, w.output, nullptr);
}

}  // namespace petrel
