// Random-weight GGUF files (Llama, or DeepSeek2's latent attention and shared experts) of a chosen shape and type, written through GgufWriter:
// benchmark stand-ins for real models (speed does not depend on the weight values) and tiny
// models for tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/convert/quant_mix.h"
#include "core/base/status.h"
#include "quant/types.h"

namespace petrel {

// How the 2-D weights are drawn. kTernary: every row is t * s with t uniform in {-1, 0, +1} and
// one positive scale s per row that f16 and bf16 hold exactly, so F16, BF16, TQ1_0 and TQ2_0
// store the weights without loss (benchmark files of the ternary types that mean something).
enum class SynthWeights { kNormal, kTernary };

struct SynthSpec {
  int64_t dim = 768;
  int64_t n_layers = 12;
  int64_t n_heads = 12;
  int64_t n_kv_heads = 12;
  int64_t ffn_dim = 2048;
  DType type = DType::kF16;      // 2-D weights; norms are always F32
  // When set, 2-D weights are drawn in f32 and quantized row by row with the type
  // ChooseTensorType picks (block types, Q4_K_M and the other mixes); `type` is then unused.
  std::optional<QuantMix> quant_mix;
  SynthWeights weights = SynthWeights::kNormal;  // norms are drawn the same either way
  std::string vocab_gguf;        // copy tokenizer.* keys from here; empty: a tiny byte vocabulary
  int64_t n_vocab = 0;           // used when vocab_gguf is empty (>= 259)
  uint64_t seed = 1;
  int64_t context = 2048;
  bool tied_embeddings = false;
  // > 0: a Mixtral-style mixture of experts (arch `llama` with `expert_count`): each block has
  // a router and `n_experts` FFNs of width `ffn_dim`, of which each token runs `n_experts_used`.
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  // > 0: a DeepSeek2 model (arch `deepseek2`): latent attention with a cache row of
  // kv_lora_rank + qk_rope_dim, heads of qk_nope_dim + qk_rope_dim (q projected directly), values
  // of v_head_dim; the first n_dense_layers blocks have a dense FFN of ffn_dim, the others
  // n_experts routed experts of expert_ffn_dim (softmax, top n_experts_used) and
  // n_shared_experts shared ones. n_kv_heads is unused.
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;
  int64_t qk_rope_dim = 0;
  int64_t v_head_dim = 0;
  int64_t expert_ffn_dim = 0;
  int64_t n_shared_experts = 0;
  int64_t n_dense_layers = 0;
};

// "small", "tinyllama" (the shapes of BASELINES.md), "moe" (8 experts, top-2, dim 2048),
// "moe-dense" (a dense model of the same total size), "moe-tiny" (a test-sized mixture),
// "deepseek2-lite" (DeepSeek-V2-Lite's widths in 8 blocks), "deepseek2-tiny" (a test-sized one) or
// "<dim>x<layers>x<heads>x<kv_heads>x<ffn>[x<experts>x<experts used>]".
Result<SynthSpec> ParseSynthShape(const std::string& shape);

// Refuses a `path` that is the `vocab_gguf` file; on any error `path` is left as it was.
Status WriteSynthModel(const SynthSpec& spec, const std::string& path);

}  // namespace petrel
