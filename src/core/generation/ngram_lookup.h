// Prompt lookup: drafts by finding the sequence's last n tokens earlier in the sequence and
// proposing what followed them there. It needs no model and pays off where the output repeats
// its input (editing, summarising, code, extraction).
#pragma once

#include "core/generation/draft_source.h"

namespace petrel {

class NgramLookup final : public DraftSource {
 public:
  // Matches the last `max_ngram` tokens, then shorter n-grams down to one token: the longest
  // match predicts best, a shorter one still finds a repetition that has just begun.
  explicit NgramLookup(size_t max_ngram) : max_ngram_(max_ngram) {}
  // The continuation of the most recent earlier occurrence of the longest matching n-gram.
  Status Propose(std::span<const int32_t> context, size_t max_tokens, Draft* draft) override;

 private:
  size_t max_ngram_;
};

}  // namespace petrel
