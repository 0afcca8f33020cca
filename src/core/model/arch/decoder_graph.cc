// BuildDecoderGraph: the decoder's nodes. The feed-forward part is its own function: a gated FFN,
// or a mixture of experts when the block has a router.
#include "core/model/arch/decoder_graph.h"

#include <algorithm>
#include <climits>
#include <cmath>

namespace petrel {
namespace {

bool Present(const TensorView* view) { return view != nullptr && view->data != nullptr; }

// Adds nodes to a graph, with each output's shape derived from its inputs.
class NodeAdder {
 public:
  NodeAdder(const ModelConfig& config, Graph* graph) : c_(config), g_(graph) {}

  const ValueDesc& Desc(ValueId value) const { return g_->values[size_t(value)]; }

  ValueId MatMul(int layer, ValueId x, const TensorView& weight, const TensorView* bias) {
    Node node{OpKind::kMatMul, layer, {x}};
    node.weight = &weight;
    node.bias = Present(bias) ? bias : nullptr;
    return g_->Add(node, Desc(x).rows, weight.desc.ne[1]);
  }
  ValueId RmsNorm(int layer, ValueId x, const TensorView& weight) {
    Node node{OpKind::kRmsNorm, layer, {x}};
    node.weight = &weight;
    node.norm.eps = c_.norm_eps;
    return g_->Add(node, Desc(x).rows, Desc(x).cols);
  }
  // The norm when its weight is present, else x itself.
  ValueId MaybeRmsNorm(int layer, ValueId x, const TensorView* weight) {
    return Present(weight) ? RmsNorm(layer, x, *weight) : x;
  }
  // q's or k's norm: per head when its weight is one head wide (Qwen3, Gemma 3), else over the
  // whole projection (OLMo 2's weight spans every head; with one head the two are the same).
  ValueId QkNorm(int layer, ValueId x, const TensorView& weight) {
    return weight.desc.ne[0] == c_.head_dim ? HeadRmsNorm(layer, x, weight)
                                            : RmsNorm(layer, x, weight);
  }
  ValueId HeadRmsNorm(int layer, ValueId x, const TensorView& weight) {
    Node node{OpKind::kHeadRmsNorm, layer, {x}};
    node.weight = &weight;
    node.norm.eps = c_.norm_eps;
    node.norm.head_dim = int32_t(c_.head_dim);
    return g_->Add(node, Desc(x).rows, Desc(x).cols);
  }
  ValueId Binary(OpKind op, int layer, ValueId a, ValueId b) {
    return g_->Add(Node{op, layer, {a, b}}, Desc(a).rows, Desc(a).cols);
  }
  ValueId Scalar(OpKind op, int layer, ValueId x, float scalar) {
    Node node{op, layer, {x}};
    node.scalar = scalar;
    return g_->Add(node, Desc(x).rows, Desc(x).cols);
  }
  Graph* graph() { return g_; }

 private:
  const ModelConfig& c_;
  Graph* g_;
};

// The gated feed-forward of block `layer` on the normed input h: W_down (act(W_gate h) ⊙ W_up h).
ValueId AddGatedFfn(NodeAdder& add, FfnActivation activation, int layer, ValueId h,
                    const BlockViews& b) {
  ValueId act = kNoValue;
  switch (activation) {
    case FfnActivation::kSilu:
      if (b.ffn_gate->desc.dtype == b.ffn_up->desc.dtype) {  // one activation type for both
        Node ffn{OpKind::kGatedFfn, layer, {h}};
        ffn.weight = b.ffn_gate;
        ffn.weight_up = b.ffn_up;
        act = add.graph()->Add(ffn, add.Desc(h).rows, b.ffn_gate->desc.ne[1]);
      } else {
        act = add.Binary(OpKind::kSiluMul, layer, add.MatMul(layer, h, *b.ffn_gate, nullptr),
                         add.MatMul(layer, h, *b.ffn_up, nullptr));
      }
      break;
    case FfnActivation::kGeluTanh:
      act = add.Binary(OpKind::kGeluMul, layer, add.MatMul(layer, h, *b.ffn_gate, nullptr),
                       add.MatMul(layer, h, *b.ffn_up, nullptr));
      break;
  }
  return add.MatMul(layer, act, *b.ffn_down, nullptr);
}

// The mixture-of-experts feed-forward of block `layer` on the normed input h: the router's
// logits, then one moe_ffn node that routes and runs the experts.
ValueId AddMoeFfn(NodeAdder& add, const ModelConfig& c, int layer, ValueId h,
                  const BlockViews& b) {
  const ValueId router_logits = add.MatMul(layer, h, *b.ffn_router, b.ffn_router_bias);
  Node moe{OpKind::kMoeFfn, layer, {h, router_logits}};
  moe.weight = b.ffn_gate_exps;
  moe.weight_up = b.ffn_up_exps;
  moe.weight_down = b.ffn_down_exps;
  moe.bias = Present(b.ffn_gate_exps_bias) ? b.ffn_gate_exps_bias : nullptr;
  moe.bias_up = Present(b.ffn_up_exps_bias) ? b.ffn_up_exps_bias : nullptr;
  moe.bias_down = Present(b.ffn_down_exps_bias) ? b.ffn_down_exps_bias : nullptr;
  moe.moe.n_experts = int32_t(c.n_experts);
  moe.moe.top_k = int32_t(c.n_experts_used);
  moe.moe.norm_top_k = c.expert_weights_norm;
  moe.moe.glu_alpha = c.expert_glu_alpha;
  moe.moe.glu_limit = c.expert_glu_limit;
  moe.moe.glu_up_offset = c.expert_glu_up_offset;
  moe.moe.gating = c.expert_gating;
  moe.moe.n_groups = int32_t(c.n_expert_groups);
  moe.moe.groups_used = int32_t(c.n_expert_groups_used);
  moe.moe.group_score = c.expert_group_score;
  moe.moe.scale = c.expert_weights_scale;
  moe.select_bias = Present(b.ffn_select_bias) ? b.ffn_select_bias : nullptr;
  const ValueId routed = add.graph()->Add(moe, add.Desc(h).rows, b.ffn_down_exps->desc.ne[1]);
  if (!Present(b.ffn_gate_shexp)) return routed;
  BlockViews shared;
  shared.ffn_gate = b.ffn_gate_shexp;
  shared.ffn_up = b.ffn_up_shexp;
  shared.ffn_down = b.ffn_down_shexp;
  return add.Binary(OpKind::kAdd, layer, routed,
                    AddGatedFfn(add, FfnActivation::kSilu, layer, h, shared));
}

// Multi-head latent attention of block `layer` on the normed input h (decoder_graph.h).
ValueId AddLatentAttention(NodeAdder& add, const ModelConfig& c, const ModelWeights& w, int layer,
                           ValueId h, const BlockViews& b) {
  const ValueId q =
      Present(b.wq_a)
          ? add.MatMul(layer, add.RmsNorm(layer, add.MatMul(layer, h, *b.wq_a, nullptr), *b.q_a_norm),
                       *b.wq_b, nullptr)
          : add.MatMul(layer, h, *b.wq, nullptr);
  const ValueId latent =
      add.RmsNorm(layer, add.MatMul(layer, h, *b.wkv_a_latent, nullptr), *b.kv_a_norm);
  const ValueId k_rope = add.MatMul(layer, h, *b.wkv_a_rope, nullptr);
  Node node{OpKind::kMlaAttention, layer, {q, latent, k_rope}};
  node.weight = b.wk_b;
  node.weight_down = b.wv_b;
  MlaParams& p = node.mla;
  p.n_heads = int32_t(c.n_heads);
  p.kv_lora = int32_t(c.kv_lora_rank);
  p.nope = int32_t(c.qk_nope_dim);
  p.rope = int32_t(c.rope.dims);
  p.v_dim = int32_t(c.v_head_dim);
  p.scale = c.attention_scale > 0.0f ? c.attention_scale : 1.0f / std::sqrt(float(c.head_dim));
  node.rope.n_heads = int32_t(c.n_heads);
  node.rope.n_kv_heads = 1;
  node.rope.head_dim = int32_t(c.head_dim);
  node.rope.rot_dims = int32_t(c.rope.dims);
  node.rope.style = c.rope.style;
  node.rope.inv_freq = w.rope_inv_freq.data();
  const ValueId attn = add.graph()->Add(node, add.Desc(q).rows, c.attn_out_dim());
  return add.MatMul(layer, attn, *b.wo, nullptr);
}

// RoPE on q and k of block `layer`, in place: the windowed layers' own table when it differs.
void AddRope(NodeAdder& add, const ModelConfig& c, const ModelWeights& w, int layer, bool slides,
             ValueId q, ValueId k) {
  Node rope{OpKind::kRope, layer, {q, k}};  // in place, no output value
  rope.rope.n_heads = int32_t(c.n_heads);
  rope.rope.n_kv_heads = int32_t(c.n_kv_heads);
  rope.rope.head_dim = int32_t(c.head_dim);
  rope.rope.rot_dims = int32_t(c.rope.dims);
  rope.rope.style = c.rope.style;
  const bool local_rope = slides && !w.rope_inv_freq_local.empty();
  rope.rope.inv_freq = local_rope ? w.rope_inv_freq_local.data() : w.rope_inv_freq.data();
  rope.rope.attn_factor = local_rope ? c.LocalRope().attn_factor : c.rope.attn_factor;
  add.graph()->nodes.push_back(rope);
}

// The attention of block `layer` on the normed input h, before the output's post-norm.
ValueId AddAttention(NodeAdder& add, const ModelConfig& c, const ModelWeights& w, int layer,
                     ValueId h, const BlockViews& b) {
  if (Present(b.wkv_a_latent)) return AddLatentAttention(add, c, w, layer, h, b);
  const bool slides = c.LayerSlides(layer);
  ValueId q = add.MatMul(layer, h, *b.wq, b.bq);
  ValueId k = add.MatMul(layer, h, *b.wk, b.bk);
  const ValueId v = add.MatMul(layer, h, *b.wv, b.bv);
  if (Present(b.q_norm)) q = add.QkNorm(layer, q, *b.q_norm);
  if (Present(b.k_norm)) k = add.QkNorm(layer, k, *b.k_norm);

  if (c.LayerRotates(layer)) AddRope(add, c, w, layer, slides, q, k);

  Node attention{OpKind::kAttention, layer, {q, k, v}};
  AttentionParams& p = attention.attention;
  p.n_heads = int32_t(c.n_heads);
  p.n_kv_heads = int32_t(c.n_kv_heads);
  p.head_dim = int32_t(c.head_dim);
  p.scale = c.attention_scale > 0.0f ? c.attention_scale : 1.0f / std::sqrt(float(c.head_dim));
  p.logit_softcap = c.attn_softcap;
  // A window past any context is no window; clamping keeps huge configured values in range.
  p.window = slides ? int32_t(std::min<int64_t>(c.sliding_window, INT32_MAX)) : 0;
  p.sinks = Present(b.attn_sinks) ? b.attn_sinks : nullptr;
  const ValueId attn = add.graph()->Add(attention, add.Desc(q).rows, c.q_dim());
  return add.MatMul(layer, attn, *b.wo, b.bo);
}

// A sublayer's output as the residual adds it: times Granite's residual multiplier.
ValueId ResidualScaled(NodeAdder& add, const ModelConfig& c, int layer, ValueId out) {
  return c.residual_scale == 1.0f ? out : add.Scalar(OpKind::kScale, layer, out, c.residual_scale);
}

}  // namespace

void BuildDecoderGraph(const DecoderSpec& spec, const ModelConfig& c, const ModelWeights& w,
                       size_t n_tokens, size_t n_selected, Graph* g) {
  NodeAdder add(c, g);
  Node embed{OpKind::kEmbed, kEmbeddingLayer};
  embed.weight = &w.token_embd;
  ValueId x = g->Add(embed, int64_t(n_tokens), c.dim);
  if (c.embedding_scale != 1.0f) {
    x = add.Scalar(OpKind::kScale, kEmbeddingLayer, x, c.embedding_scale);
  }
  for (int l = 0; l < int(c.n_layers); ++l) {
    const BlockViews b = spec.block_views(w.layers[size_t(l)]);
    // OLMo 2 norms the sublayers' outputs with the block's two norms instead of their inputs.
    const bool after = c.norms_after_sublayers;
    const ValueId h = after ? x : add.RmsNorm(l, x, *b.attn_norm);
    const ValueId attn = add.MaybeRmsNorm(l, AddAttention(add, c, w, l, h, b),
                                          after ? b.attn_norm : b.attn_post_norm);
    x = add.Binary(OpKind::kAdd, l, x, ResidualScaled(add, c, l, attn));
    const ValueId h2 = after ? x : add.RmsNorm(l, x, *b.ffn_norm);
    const ValueId ffn_out = Present(b.ffn_router) ? AddMoeFfn(add, c, l, h2, b)
                                                  : AddGatedFfn(add, spec.activation, l, h2, b);
    const ValueId ffn = add.MaybeRmsNorm(l, ffn_out, after ? b.ffn_norm : b.ffn_post_norm);
    x = add.Binary(OpKind::kAdd, l, x, ResidualScaled(add, c, l, ffn));
  }
  const int head = int(c.n_layers);
  const ValueId selected = g->Add(Node{OpKind::kGetRows, head, {x}}, int64_t(n_selected), c.dim);
  const ValueId normed = add.RmsNorm(head, selected, w.output_norm);
  if (g->hidden_output) {  // embeddings: the final norm's output, as llama.cpp's
    g->logits = normed;
    return;
  }
  ValueId logits = add.MatMul(head, normed, w.output, nullptr);
  // Granite divides its logits (before any soft-cap; no family has both).
  if (c.logits_divisor != 1.0f) {
    logits = add.Scalar(OpKind::kScale, head, logits, 1.0f / c.logits_divisor);
  }
  if (c.final_softcap > 0.0f) logits = add.Scalar(OpKind::kSoftcap, head, logits, c.final_softcap);
  g->logits = logits;
}

}  // namespace petrel
