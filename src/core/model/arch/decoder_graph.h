// The forward pass of a dense decoder-only transformer, shared by the families that differ only
// in data: which weights a block has (optional q/k norms, post-norms, biases) and the config's
// variants (window per layer, soft-caps, scales, RoPE bases). Each family maps its own weight
// enum onto `BlockViews` and passes its feed-forward activation.
//
// Per block, with n(·) an RMS norm whose weight may be absent (then skipped):
//   h = n_attn(x); q, k, v = Wq h (+bq), Wk h (+bk), Wv h (+bv); q, k = n_q(q), n_k(k) per head
//   (or over the whole projection when the norm's weight spans it);
//   q, k = RoPE(q, k) (not in NoPE layers); x += r · n_post_attn(Wo · Attn(q, k, v) (+bo))
//   (Attn with optional sinks); h = n_ffn(x); x += r · n_post_ffn(FFN(h))
// with r the residual scale (1 but for Granite). With `norms_after_sublayers` (OLMo 2) n_attn and
// n_ffn move onto the outputs instead: x += n_attn(Attn(x)), x += n_ffn(FFN(x)).
// where FFN is a gated FFN, or with a router a mixture of experts: the router's softmax picks
// each token's top-k experts, whose gated FFNs' outputs are summed with those weights.
#pragma once

#include <cstddef>

#include "core/graph/graph.h"
#include "core/model/architecture.h"

namespace petrel {

// One block's weights as the graph uses them; nullptr (or a view without data) = absent.
struct BlockViews {
  const TensorView* attn_norm = nullptr;
  const TensorView* wq = nullptr;
  const TensorView* wk = nullptr;
  const TensorView* wv = nullptr;
  const TensorView* wo = nullptr;
  const TensorView* bq = nullptr;
  const TensorView* bk = nullptr;
  const TensorView* bv = nullptr;
  const TensorView* bo = nullptr;          // output projection's bias (gpt-oss)
  const TensorView* attn_sinks = nullptr;  // (n_heads) sink logits (gpt-oss)
  const TensorView* q_norm = nullptr;  // (head_dim), applied to every head
  const TensorView* k_norm = nullptr;
  const TensorView* attn_post_norm = nullptr;  // on the attention output, before the residual
  const TensorView* ffn_norm = nullptr;
  const TensorView* ffn_gate = nullptr;
  const TensorView* ffn_up = nullptr;
  const TensorView* ffn_down = nullptr;
  const TensorView* ffn_post_norm = nullptr;  // on the FFN output, before the residual
  // Mixture of experts (used instead of ffn_gate/up/down when the router is present): the
  // router [D, n_experts] and the stacked experts [D, n_ff, n_experts] / [n_ff, D, n_experts].
  const TensorView* ffn_router = nullptr;
  const TensorView* ffn_gate_exps = nullptr;
  const TensorView* ffn_up_exps = nullptr;
  const TensorView* ffn_down_exps = nullptr;
  // Optional: the router's bias (n_experts) and the experts' biases, one row per expert
  // ([n_ff, n_experts], [n_ff, n_experts], [D, n_experts]) (gpt-oss).
  const TensorView* ffn_router_bias = nullptr;
  const TensorView* ffn_gate_exps_bias = nullptr;
  const TensorView* ffn_up_exps_bias = nullptr;
  const TensorView* ffn_down_exps_bias = nullptr;
  const TensorView* ffn_select_bias = nullptr;  // (n_experts) added to scores for choosing only
  // Shared experts, run for every token beside the routed ones (weight 1): one gated FFN.
  const TensorView* ffn_gate_shexp = nullptr;
  const TensorView* ffn_up_shexp = nullptr;
  const TensorView* ffn_down_shexp = nullptr;
  // Multi-head latent attention (used instead of wk/wv when wkv_a_latent is present): q from
  // wq_b n_qa(wq_a h) (or wq h), the latent c = n_kva(wkv_a_latent h), the shared rope key
  // wkv_a_rope h, and the per-head W_UK^T / W_UV tensors the mla_attention node reads.
  const TensorView* wq_a = nullptr;
  const TensorView* q_a_norm = nullptr;
  const TensorView* wq_b = nullptr;
  const TensorView* wkv_a_latent = nullptr;
  const TensorView* wkv_a_rope = nullptr;
  const TensorView* kv_a_norm = nullptr;
  const TensorView* wk_b = nullptr;
  const TensorView* wv_b = nullptr;
};

// The gated feed-forward's activation on the gate projection.
enum class FfnActivation : uint8_t {
  kSilu,      // SwiGLU (Llama, Qwen, Phi-3)
  kGeluTanh,  // GeGLU with tanh-form GELU (Gemma)
};

struct DecoderSpec {
  BlockViews (*block_views)(const LayerWeights& layer) = nullptr;
  FfnActivation activation = FfnActivation::kSilu;
};

// Appends the forward pass of `n_tokens` tokens, keeping `n_selected` rows for the logits.
void BuildDecoderGraph(const DecoderSpec& spec, const ModelConfig& config,
                       const ModelWeights& weights, size_t n_tokens, size_t n_selected,
                       Graph* graph);

}  // namespace petrel
