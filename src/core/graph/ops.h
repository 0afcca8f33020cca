// The op vocabulary of the model graph: coarse ("fat") ops that every backend implements.
#pragma once

#include <cstdint>

namespace petrel {

// Adding an op: a value here, a case in every backend's switch (no `default:` so -Wswitch finds
// them), a scalar reference kernel, and a case in the backend op tests.
enum class OpKind : uint8_t {
  kEmbed,      // out[t] = row tokens[t] of the embedding table, as f32
  kRmsNorm,    // out = x / rms(x) * weight
  kMatMul,     // out[t] = W x[t] (+ bias): one row of W per output feature
  kRope,       // rotate q (in[0]) and k (in[1]) in place by each token's position
  kAttention,  // write k/v rows into the paged KV cache, then attention of q over it (causal or
               // bidirectional, AttentionParams::causal)
  kSiluMul,    // out = silu(gate) * up
  kGatedFfn,   // out[t] = silu(W_gate x[t]) * (W_up x[t]): both projections and the product in
               // one sweep over the rows (one pass, one barrier, no gate/up values)
  kAdd,        // out = a + b (residual)
  kGetRows,    // out[i] = in[rows[i]]: keeps only the rows whose logits the batch wants
  kHeadRmsNorm,  // out = each head_dim slice of x RMS-normed with the same weight (q/k norms)
  kGeluMul,    // out = gelu_tanh(gate) * up (GeGLU)
  kScale,      // out = x * scalar (Gemma's embedding scale)
  kSoftcap,    // out = scalar * tanh(x / scalar) (final-logit soft-capping)
  kMoeFfn,     // mixture of experts: in[0] = x, in[1] = router logits (tokens, n_experts);
               // out[t] = sum over t's top-k experts e of p_e * W_down[e] (silu(W_gate[e] x[t])
               // * W_up[e] x[t]), each expert's gated FFN run over only the tokens routed to it
  kLayerNorm,  // out = (x - mean(x)) / sqrt(var(x) + eps) * weight (+ bias)
  kGelu,       // out = gelu(x) in the exact erf form, x/2 (1 + erf(x / sqrt 2)) (BERT's FFN)
  kAddRows,    // out[t] = x[t] + table row r(t) as f32, r(t) = t's position or a fixed row
               // (absolute position and token-type embeddings)
  kMlaAttention,  // multi-head latent attention (DeepSeek V2/V3): in[0] = q (tokens, heads x
                  // (nope + rope)), in[1] = the normed latent c (tokens, kv_lora), in[2] = the
                  // shared rope key (tokens, rope); ropes q's rope part and the key, writes
                  // [c | key] into the layer's cache, attends over the cached latents with W_UK
                  // absorbed into q and applies W_UV after (out: tokens, heads x v_dim)
  kScaleRows,  // out[t] = x[t] * s[t], s the batch's row-scale vector Node::row_scales
               // (BatchContext::row_scales): each sequence's scale of a LoRA adapter
  kCount
};

const char* OpName(OpKind op);

// How pairs of dimensions are rotated. GGUF Llama files store Q/K rows permuted so that pairs
// are adjacent (`kInterleaved`, llama.cpp's "norm" mode); Hugging Face checkpoints rotate the
// two halves of each head (`kHalfSplit`, GPT-NeoX style). Using the source's convention lets
// both run on their mapped bytes unchanged and give the same logits.
enum class RopeStyle : uint8_t { kInterleaved, kHalfSplit };

// How a mixture of experts turns router logits into scores: a softmax over all experts
// (Mixtral, Qwen3-MoE, DeepSeek V2) or each logit's sigmoid (DeepSeek V3).
enum class MoeGating : uint8_t { kSoftmax, kSigmoid };
// How a group of experts is scored when routing is limited to the best groups: its largest
// score (DeepSeek V2's group_limited_greedy) or the sum of its two largest (V3's noaux_tc).
enum class MoeGroupScore : uint8_t { kMax, kTopTwoSum };

}  // namespace petrel
