// ModelConfig: every hyperparameter and architectural variant of a model, as data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/graph/ops.h"  // RopeStyle

namespace petrel {

enum class RopeScalingKind : uint8_t { kNone, kLinear, kLlama3, kYarn, kLongRope };

// How an embedding is made from a sequence's final hidden states: GGUF `<arch>.pooling_type`
// (0 none, 1 mean, 2 cls, 3 last), sentence-transformers' `1_Pooling/config.json`.
enum class PoolingKind : uint8_t {
  kUnset,  // the model does not say: causal models take the last token, encoders the mean
  kNone,   // per-token states, no sentence vector
  kMean,   // mean over every token of the sequence (special tokens included)
  kCls,    // the first token's state
  kLast,   // the last token's state
};
const char* PoolingName(PoolingKind pooling);
// "none", "mean", "cls", "last"; an error naming the value otherwise.
Result<PoolingKind> ParsePooling(std::string_view name);
// llama.cpp's `pooling_type` numbers; an error naming the value for others (4, rank, too).
Result<PoolingKind> PoolingFromGguf(uint64_t value);

struct RopeConfig {
  float base = 10000.0f;
  int64_t dims = 0;  // rotated dimensions per head (== head_dim for Llama)
  RopeStyle style = RopeStyle::kInterleaved;
  RopeScalingKind scaling = RopeScalingKind::kNone;
  float factor = 1.0f;             // linear and llama3
  float low_freq_factor = 1.0f;    // llama3
  float high_freq_factor = 4.0f;   // llama3
  int64_t original_context = 8192;  // llama3, yarn, longrope
  // YaRN (rope_scaling.rope_type "yarn"): pairs rotating faster than `beta_fast` turns over the
  // original context keep their frequency, those slower than `beta_slow` turns are divided by
  // `factor`, a linear ramp between. The ramp's ends are rounded outwards (floor/ceil) when
  // `yarn_truncate`, as transformers' default and llama.cpp always do; gpt-oss does not round.
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  bool yarn_truncate = true;
  // Multiplies cos and sin (so q·k by its square): YaRN's attention factor, 0.1·ln(factor) + 1
  // unless the config names it; 1 for the other kinds.
  float attn_factor = 1.0f;
  std::vector<float> freq_factors; // per-pair divisors (GGUF `rope_freqs.weight`), empty = none
  // LongRoPE (Phi-3/3.5 long-context, HF rope_scaling "longrope"/"su"): two tables of per-pair
  // divisors, `long_factors` for contexts past `original_context` and `short_factors` within
  // it; `freq_factors` holds the one in use (SelectLongRopeFactors) and `attn_factor` is
  // sqrt(1 + ln(s) / ln(original_context)) for the stretch s unless the config names it.
  std::vector<float> long_factors;
  std::vector<float> short_factors;

  // LongRoPE: makes `freq_factors` the table for sequences of up to `context` tokens. The
  // table is chosen once for the context the model runs with, as llama.cpp does (short when
  // it fits `original_context`, else long); transformers instead switches per forward pass by
  // the sequence's current length, so a long-context run of a short prompt differs from it.
  void SelectLongRopeFactors(int64_t context);

  // The rotation frequency of each pair i in [0, dims/2), scaling applied.
  std::vector<double> InverseFrequencies() const;
};

struct ModelConfig {
  std::string architecture;  // the source's name: "llama", "mistral", "qwen2"
  int64_t n_vocab = 0;
  int64_t dim = 0;          // hidden size
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn_dim = 0;
  // Mixture of experts (0 experts: a dense FFN). Each token runs `n_experts_used` of `n_experts`
  // gated FFNs of width `expert_ffn_dim`, weighted by the router's softmax, renormalised over
  // the chosen ones when `expert_weights_norm`.
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t expert_ffn_dim = 0;
  bool expert_weights_norm = true;
  // The experts' gated activation (MoeParams): silu(g) * u by default; gpt-oss clamps g and u
  // at `expert_glu_limit` (> 0), scales the sigmoid's input by `expert_glu_alpha` and adds
  // `expert_glu_up_offset` to u.
  float expert_glu_alpha = 1.0f;
  float expert_glu_limit = 0.0f;
  float expert_glu_up_offset = 0.0f;
  // DeepSeek's routing (MoeParams): sigmoid scores, groups of experts of which only the best
  // `n_expert_groups_used` are eligible, the chosen weights times `expert_weights_scale`; its
  // first `n_dense_layers` blocks have a dense FFN of ffn_dim, and every expert block also runs
  // `n_shared_experts` shared experts (one gated FFN of n_shared_experts * expert_ffn_dim).
  MoeGating expert_gating = MoeGating::kSoftmax;
  int64_t n_expert_groups = 1;
  int64_t n_expert_groups_used = 1;
  MoeGroupScore expert_group_score = MoeGroupScore::kTopTwoSum;
  float expert_weights_scale = 1.0f;
  int64_t n_dense_layers = 0;
  int64_t n_shared_experts = 0;
  // Multi-head latent attention (DeepSeek V2/V3) when kv_lora_rank > 0: q = Wq_b n(Wq_a h) (or
  // Wq h when q_lora_rank is 0), heads of head_dim = qk_nope_dim + rope.dims; keys and values
  // come from one latent of kv_lora_rank per token (plus a rope key shared by all heads), and
  // the KV cache holds that latent row, not the heads' keys and values.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;
  int64_t v_head_dim = 0;
  int64_t max_context = 0;   // trained context length
  int64_t sliding_window = 0;  // 0: full attention
  // Which layers attend through the window: empty = every layer when sliding_window > 0; else
  // one flag per layer (Gemma interleaves windowed and global layers).
  std::vector<uint8_t> sliding_layers;
  // > 0: windowed layers rotate with this base and without the scaling (Gemma 3's local layers);
  // the other layers use `rope`.
  float rope_local_base = 0.0f;
  float attention_scale = 0.0f;  // multiplies q·k; 0: 1/sqrt(head_dim)
  float attn_softcap = 0.0f;     // 0: none; else scores become c·tanh(s/c) (Gemma 2)
  float final_softcap = 0.0f;    // 0: none; else logits become c·tanh(x/c) (Gemma 2)
  float embedding_scale = 1.0f;  // multiplies the embedding rows (Gemma: sqrt(dim))
  // Granite: each block's attention and FFN outputs are multiplied by `residual_scale` before
  // the residual add, and the logits are divided by `logits_divisor`.
  float residual_scale = 1.0f;
  float logits_divisor = 1.0f;
  // OLMo 2: a block's two norms act on the attention and FFN outputs before the residual add
  // (x + n(f(x))) instead of on their inputs (x + f(n(x))).
  bool norms_after_sublayers = false;
  // One flag per layer: 1 = the layer applies no RoPE at all (SmolLM3's NoPE layers); empty =
  // every layer rotates.
  std::vector<uint8_t> nope_layers;
  bool qk_norm = false;          // per-head RMS norm of q and k before RoPE (Qwen3, Gemma 3)
  float norm_eps = 1e-5f;
  RopeConfig rope;
  bool tied_embeddings = false;  // output projection is the embedding table
  bool qkv_bias = false;         // Qwen2
  bool output_proj_bias = false;
  // Encoders (BERT): attention sees the whole sequence, positions index a learned table of
  // `n_positions` rows (0: RoPE), and without an output head the model gives only its final
  // hidden states (embeddings).
  bool causal_attention = true;
  int64_t n_positions = 0;
  int64_t n_token_types = 0;  // rows of the token-type table (BERT's segment embeddings)
  bool embeddings_only = false;
  PoolingKind pooling = PoolingKind::kUnset;
  // The pooling an embedding request gets when it names none: the model's, else last-token
  // for causal models and the mean for encoders.
  PoolingKind DefaultPooling() const {
    if (pooling != PoolingKind::kUnset) return pooling;
    return causal_attention ? PoolingKind::kLast : PoolingKind::kMean;
  }

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  bool mla() const { return kv_lora_rank > 0; }
  // Elements of one token's K row in one layer's cache (the latent row with MLA), and whether
  // the cache also keeps a V row of as many (not with MLA: values come from the latent).
  int64_t kv_row_elems() const { return mla() ? kv_lora_rank + rope.dims : kv_dim(); }
  bool kv_has_values() const { return !mla(); }
  // The attention's output width (the output projection's input).
  int64_t attn_out_dim() const { return mla() ? n_heads * v_head_dim : q_dim(); }
  // Whether block `layer` runs the experts (else its dense FFN).
  bool LayerHasExperts(int64_t layer) const { return n_experts > 0 && layer >= n_dense_layers; }
  // Whether layer `layer` attends only the last `sliding_window` positions.
  bool LayerSlides(int64_t layer) const {
    if (sliding_window <= 0) return false;
    return sliding_layers.empty() || (size_t(layer) < sliding_layers.size() && sliding_layers[size_t(layer)]);
  }
  // Whether layer `layer` rotates q and k (not a NoPE layer).
  bool LayerRotates(int64_t layer) const {
    return size_t(layer) >= nope_layers.size() || !nope_layers[size_t(layer)];
  }
  // The RoPE of windowed layers when it differs (rope_local_base > 0): `rope` with that base and
  // no scaling.
  RopeConfig LocalRope() const;
  // Checks the values against each other (divisibility, positivity); names the bad field.
  Status Validate() const;
  std::string Summary() const;   // one line per field group, for `petrel info`
};

// The most blocks a model may have (Validate). A reader checks a block count against it as soon
// as it reads it, before anything (per-layer patterns, weight tables) is sized by it: `where`
// names the field ("key llama.block_count").
inline constexpr int64_t kMaxLayers = 4096;
Status CheckBlockCount(int64_t n_layers, const std::string& where);

}  // namespace petrel
