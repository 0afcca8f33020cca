// Token sampling over host logits: greedy, or temperature with top-k / top-p and a seeded RNG.
// Stages are small functions over a candidate list so the full chain (penalties, min-p, …)
// slots in as more stages.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace petrel {

struct SamplingParams {
  float temperature = 0.8f;  // <= 0: greedy
  int32_t top_k = 40;        // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  uint64_t seed = 0;         // same seed, same logits -> same tokens
};

struct Candidate {
  int32_t id;
  float logit;
  float prob;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int32_t Sample(const float* logits, size_t n_vocab);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;
};

// Index of the largest value; the lowest index wins ties.
int32_t ArgMax(const float* values, size_t n);

}  // namespace petrel
