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

// The one order every stage sees: logit descending, lower id first on ties. It is total (ids are
// unique), so any correct sort, full or partial, gives the same sequence.
inline bool Ahead(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

struct Candidates {
  std::vector<Candidate> items;
  bool sorted = false;  // in Ahead() order

  void Reset(const float* logits, size_t n_vocab);
  void Sort();               // stable, deterministic order
  // Keeps the n most likely, in order: a partial sort, so top-k over a whole vocabulary costs
  // about one pass.
  void SortFirst(size_t n);
  // Index of the first candidate in Ahead() order, without sorting.
  size_t Best() const;
  void Softmax();            // sorts, then fills prob from logit
  void KeepFirst(size_t n);  // after Sort(): keeps the n most likely
  size_t size() const { return items.size(); }

 private:
  // The radix sort's second buffer and keys, kept across steps: a 32k vocabulary's are 128 KB
  // and more, which malloc would map and unmap on every sort.
  std::vector<Candidate> scratch_;
  std::vector<uint32_t> keys_, scratch_keys_;
};

}  // namespace petrel
