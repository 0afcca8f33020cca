// Beam search: deterministic best-of-N decoding without sampling. Beams share their common
// prefix in the paged KV cache (Fork, copy-on-write) and are decoded together in one batch.
#pragma once

#include <cstdint>
#include <vector>

#include "core/runtime/engine.h"

namespace petrel {

struct BeamSearchOptions {
  size_t n_beams = 4;
  size_t max_new_tokens = 64;
  float length_penalty = 1.0f;  // final score = sum of log-probs / length^length_penalty
  bool stop_at_end_of_generation = true;
};

struct BeamSearchResult {
  std::vector<int32_t> new_ids;  // the best hypothesis (with its end token when it ended there)
  float score = 0.0f;            // its length-normalised log-probability
  float logprob = 0.0f;          // its summed log-probability
};

// Continues `seq` (left as it was: the beams run on forks of it).
Result<BeamSearchResult> BeamSearch(Engine& engine, SeqId seq, const std::vector<int32_t>& prompt,
                                    const BeamSearchOptions& options);

}  // namespace petrel
