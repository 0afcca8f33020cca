// The model graph: a flat list of coarse op nodes over f32 activation values, built per batch.
#pragma once

#include <cstdint>
#include <vector>

#include "core/graph/ops.h"
#include "core/base/tensor.h"

namespace petrel {

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

// Layer index used for nodes outside the repeated blocks.
constexpr int kEmbeddingLayer = -1;
// The output head's node layer is `n_layers` (one past the last block).

// Parameters of the ops that have them. They live in the node, so a family's variant (its
// attention scale, its RoPE frequencies) is data its graph builder sets, not a backend constant.
struct NormParams {
  float eps = 0.0f;
  int32_t head_dim = 0;  // head_rms_norm: elements per head (the weight's length)
};

// Rotates q (n_heads heads) and k (n_kv_heads heads) of head_dim by each token's position:
// pair i of the first rot_dims dimensions turns by position * inv_freq[i].
struct RopeParams {
  int32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int32_t rot_dims = 0;                 // rotated dimensions per head (rot_dims / 2 pairs)
  RopeStyle style = RopeStyle::kInterleaved;
  const double* inv_freq = nullptr;     // (rot_dims / 2), scaling applied; owned by the model
  // Multiplies cos and sin (so the rotated dimensions): YaRN's attention factor, 1 otherwise.
  float attn_factor = 1.0f;
};

// Attention of q over the layer's paged KV cache, after writing k and v there: causal (query i
// sees keys up to its own position), or bidirectional (every key of its sequence in the cache
// once the batch is written, BatchContext::n_ctx_all; encoders such as BERT, whose sequences
// are each decoded in one pass).
struct AttentionParams {
  int32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;         // applied to q·k (1/sqrt(head_dim) for Llama)
  float logit_softcap = 0.0f; // 0: none; else scores become softcap * tanh(scores / softcap)
  int32_t window = 0;         // 0: every earlier position; else only the last `window`
                              // (key j is visible from query i iff 0 <= i - j < window)
  // Attention sinks (gpt-oss), or nullptr: one f32 logit s_h per query head that joins the
  // softmax's denominator and is then dropped, p_ij = exp(a_ij) / (sum_j exp(a_ij) + exp(s_h)).
  // Used raw (not multiplied by `scale`). (n_heads), owned by the model.
  const TensorView* sinks = nullptr;
  bool causal = true;
};

// add_rows: which row of the table each token adds.
struct AddRowsParams {
  bool by_position = true;  // the token's position; else `row` for every token
  int32_t row = 0;
};

// Routing of a mixture-of-experts FFN: p = softmax(router logits) (or sigmoid, `gating`); the
// selection score of expert e is p_e + the node's `select_bias` (when present, DeepSeek V3's
// correction bias; it only chooses, the weights stay p). With n_groups > 1 the experts form
// n_groups equal groups of consecutive indices, each scored by `group_score` over its selection
// scores, and only the best `groups_used` groups are eligible. Each token takes the k largest
// selection scores (ties: the lower expert index), weights p renormalised to sum 1 when
// `norm_top_k` (with softmax gating, the softmax over the chosen logits only, as gpt-oss
// routes), then multiplied by `scale`.
// The experts' gated activation: silu(g) * u by default; gpt-oss's clamped form when
// `glu_limit` > 0 or `glu_alpha` != 1 or `glu_up_offset` != 0:
//   g' = min(g, limit), u' = clamp(u, -limit, limit) (no clamp when limit is 0),
//   out = g' * sigmoid(alpha * g') * (u' + up_offset).
struct MoeParams {
  int32_t n_experts = 0;
  int32_t top_k = 0;
  bool norm_top_k = true;
  float glu_alpha = 1.0f;
  float glu_limit = 0.0f;
  float glu_up_offset = 0.0f;

  bool PlainSilu() const { return glu_alpha == 1.0f && glu_limit == 0.0f && glu_up_offset == 0.0f; }
  MoeGating gating = MoeGating::kSoftmax;
  int32_t n_groups = 1;
  int32_t groups_used = 1;
  MoeGroupScore group_score = MoeGroupScore::kTopTwoSum;
  float scale = 1.0f;
};

// Multi-head latent attention: n_heads query heads of nope + rope dims, one cached latent row
// of kv_lora + rope per position (the normed latent c, then the roped shared key). Head h's key
// is [W_UK[h] c | k_rope] and its value W_UV[h] c; the op computes the same with W_UK[h]
// absorbed into the query (q_lat = W_UK[h]^T q_nope) and W_UV[h] applied to the softmax-weighted
// sum of latents, so only the latent rows are ever read. `rope` on the node gives the rotation
// of the rope parts (rot_dims = rope).
struct MlaParams {
  int32_t n_heads = 0;
  int32_t kv_lora = 0, nope = 0, rope = 0, v_dim = 0;
  float scale = 1.0f;  // applied to q·k (1/sqrt(nope + rope))
};

struct Node {
  OpKind op = OpKind::kAdd;
  int layer = kEmbeddingLayer;
  ValueId inputs[3] = {kNoValue, kNoValue, kNoValue};
  ValueId output = kNoValue;
  const TensorView* weight = nullptr;  // matmul / norm weight, embedding table; gated_ffn: gate
  const TensorView* weight_up = nullptr;  // gated_ffn: the up projection
  // moe_ffn: `weight`, `weight_up` and this are the experts' stacked gate, up (ne = [n_in, n_ff,
  // n_experts]) and down ([n_ff, n_out, n_experts]) matrices.
  const TensorView* weight_down = nullptr;
  const TensorView* bias = nullptr;    // optional matmul / layer_norm bias (f32); moe_ffn: gate biases
  // moe_ffn, optional: the experts' up ([n_ff, n_experts]) and down ([n_out, n_experts]) biases
  // (f32; `bias` holds the gate's, [n_ff, n_experts]).
  const TensorView* bias_up = nullptr;
  const TensorView* bias_down = nullptr;
  // moe_ffn, optional: the routing's selection bias (n_experts, f32; MoeParams).
  const TensorView* select_bias = nullptr;
  // mla_attention: `weight` is W_UK^T per head ([nope, kv_lora, n_heads]: head h's rows map a
  // q_nope to the latent space) and `weight_down` W_UV per head ([kv_lora, v_dim, n_heads]).
  NormParams norm = {};                // rms_norm, layer_norm
  RopeParams rope = {};                // rope
  AttentionParams attention = {};      // attention
  MoeParams moe = {};                  // moe_ffn
  AddRowsParams add_rows = {};         // add_rows (its table is `weight`)
  MlaParams mla = {};                  // mla_attention (with `rope`)
  float scalar = 0.0f;                 // scale: the factor; softcap: the cap (> 0)
  int32_t row_scales = 0;              // scale_rows: which of BatchContext's row-scale vectors
};

// Values are row-major f32 matrices of (rows, cols): rows = tokens (or selected tokens).
struct ValueDesc {
  int64_t rows = 0;
  int64_t cols = 0;
  size_t bytes() const { return size_t(rows) * size_t(cols) * sizeof(float); }
};

struct Graph {
  std::vector<ValueDesc> values;
  std::vector<Node> nodes;
  ValueId logits = kNoValue;  // (n_selected, n_vocab), or (n_selected, dim) with hidden_output
  // Set before building: end at the final hidden states (after the final norm, before any
  // output head) instead of the logits, for embeddings. Families without an output head
  // (encoders) always end there.
  bool hidden_output = false;

  ValueId AddValue(int64_t rows, int64_t cols) {
    values.push_back({rows, cols});
    return ValueId(values.size() - 1);
  }
  ValueId Add(Node node, int64_t out_rows, int64_t out_cols) {
    node.output = AddValue(out_rows, out_cols);
    nodes.push_back(node);
    return node.output;
  }
  void Clear() {
    values.clear();
    nodes.clear();
    logits = kNoValue;  // hidden_output is the caller's choice and stays
  }
};

}  // namespace petrel
