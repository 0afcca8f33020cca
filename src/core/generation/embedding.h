// Embeddings: sequences of token ids to one vector each (or one per token), through the
// engine's final hidden states, pooled and normalised on the host.
//
// Pooling runs on the host rather than as a graph op: it needs a whole sequence's rows, which
// the engine already returns (Batch::hidden_output), and it is a sum over a few rows next to
// the passes that made them. Sequences are packed into batches of whole sequences; an encoder
// (bidirectional attention) must see each sequence in one pass, a causal model's long sequence
// is fed in chunks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/base/status.h"
#include "core/model/model_config.h"  // PoolingKind

namespace petrel {

class Engine;

struct EmbedOptions {
  PoolingKind pooling = PoolingKind::kUnset;  // unset: the model's (ModelConfig::DefaultPooling)
  // llama.cpp's --embd-normalize: -1 none, 0 max absolute value scaled to int16 (32760),
  // 1 taxicab, 2 euclidean (L2, the default), p > 2 the p-norm.
  int normalize = 2;
};

// Per input: dim floats (pooled), or with pooling none n_tokens * dim (each token's state,
// each row normalised). `tokens_used` (may be null) gets the total input tokens.
struct Embeddings {
  std::vector<std::vector<float>> vectors;
  size_t dim = 0;
  size_t tokens = 0;
};

// Validates every input first (non-empty, ids in the vocabulary, within the context and, for
// an encoder, within one pass), naming the first bad one by index; nothing runs then.
Result<Embeddings> Embed(Engine& engine, std::span<const std::vector<int32_t>> inputs,
                         const EmbedOptions& options = {});

// Scales `v` in place by llama.cpp's --embd-normalize rule (see EmbedOptions).
void NormalizeEmbedding(std::span<float> v, int normalize);

}  // namespace petrel
