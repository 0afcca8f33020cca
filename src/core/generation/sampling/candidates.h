// The candidate list the sampler stages filter and reshape: token ids with logits and (once a
// stage needs them) probabilities.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace petrel {

struct Candidate {
  int32_t id;
  float logit;
  float prob;
};

struct Candidates {
  std::vector<Candidate> items;
  bool sorted = false;  // by logit, descending (ties: lower id first)

  void Reset(const float* logits, size_t n_vocab);
  void Sort();               // stable, deterministic order
  void Softmax();            // sorts, then fills prob from logit
  void KeepFirst(size_t n);  // after Sort(): keeps the n most likely
  size_t size() const { return items.size(); }
};

}  // namespace petrel
