// Candidates: sorting and softmax shared by the sampler stages.
#include "core/generation/sampling/candidates.h"

#include <algorithm>
#include <cmath>

namespace petrel {

void Candidates::Reset(const float* logits, size_t n_vocab) {
  items.resize(n_vocab);
  for (size_t i = 0; i < n_vocab; ++i) items[i] = {int32_t(i), logits[i], 0.0f};
  sorted = false;
}

void Candidates::Sort() {
  if (sorted) return;
  std::sort(items.begin(), items.end(), [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  });
  sorted = true;
}

void Candidates::Softmax() {
  Sort();
  if (items.empty()) return;
  const float max_logit = items[0].logit;
  double sum = 0.0;
  for (Candidate& c : items) {
    c.prob = std::isinf(c.logit) && c.logit < 0 ? 0.0f : std::exp(c.logit - max_logit);
    sum += c.prob;
  }
  for (Candidate& c : items) c.prob = float(c.prob / sum);
}

void Candidates::KeepFirst(size_t n) {
  if (n < items.size()) items.resize(std::max<size_t>(n, 1));
}

}  // namespace petrel
