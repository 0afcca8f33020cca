// Sampler stages: top-k, softmax with temperature, top-p, then a draw.
#include "core/sampling/sampler.h"

#include <algorithm>
#include <cmath>

namespace petrel {

int32_t ArgMax(const float* values, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i) {
    if (values[i] > values[best]) best = i;
  }
  return int32_t(best);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

int32_t Sampler::Sample(const float* logits, size_t n_vocab) {
  if (params_.temperature <= 0.0f || params_.top_k == 1) return ArgMax(logits, n_vocab);
  candidates_.resize(n_vocab);
  for (size_t i = 0; i < n_vocab; ++i) candidates_[i] = {int32_t(i), logits[i], 0.0f};
  // Sort by logit, ties by id, so the order (and the draw) is deterministic.
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  size_t keep = n_vocab;
  if (params_.top_k > 0 && size_t(params_.top_k) < n_vocab) {
    keep = size_t(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + long(keep), candidates_.end(), by_logit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  candidates_.resize(keep);
  const float max_logit = candidates_[0].logit;
  double sum = 0.0;
  for (Candidate& c : candidates_) {
    c.prob = std::exp((c.logit - max_logit) / params_.temperature);
    sum += c.prob;
  }
  for (Candidate& c : candidates_) c.prob = float(c.prob / sum);
  if (params_.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t cut = candidates_.size();
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cumulative += candidates_[i].prob;
      if (cumulative >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    candidates_.resize(cut);
  }
  double total = 0.0;
  for (const Candidate& c : candidates_) total += c.prob;
  // A uniform draw from 53 random bits: the same on every platform, unlike std distributions.
  const double u = double(rng_() >> 11) * (1.0 / 9007199254740992.0) * total;
  double acc = 0.0;
  for (const Candidate& c : candidates_) {
    acc += c.prob;
    if (u < acc) return c.id;
  }
  return candidates_.back().id;
}

}  // namespace petrel
