// Where speculative decoding's drafts come from: a source proposes the tokens likely to follow
// a sequence's tokens, cheaply; the model then checks them all in one forward pass
// (speculative.h). Two sources: a smaller draft model (draft_model.h) and n-gram lookup in the
// sequence itself (ngram_lookup.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/base/status.h"

namespace petrel {

struct Draft {
  std::vector<int32_t> tokens;
  // The distribution each token was drawn from, n_vocab probabilities per token in order;
  // empty when every token was chosen deterministically (a point mass: a greedy draft model,
  // n-gram lookup). The acceptance rule needs it to keep the model's distribution exact.
  std::vector<float> probs;
  // Tokens of the context this Propose took in before it could draft (a draft model's
  // catch-up feed, when CatchUp did not take them in first); 0 for sources that keep no state.
  size_t synced = 0;
  // Steps taken after the first drafted token (a draft model's single-token feeds), for the
  // speculator's timing of a step; 0 for sources that do no work per token.
  size_t steps = 0;

  void Clear() {
    tokens.clear();
    probs.clear();
    synced = 0;
    steps = 0;
  }
};

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  // Proposes at most `max_tokens` tokens to follow `context`, every token the sequence will
  // hold once its last sampled token is fed (negative ids: tokens whose values are not known).
  // Fewer, or none, is a valid answer: then the model decodes one token as usual.
  virtual Status Propose(std::span<const int32_t> context, size_t max_tokens, Draft* draft) = 0;
  // Takes in the tokens of `context` (as for Propose) that the source has fallen behind by, so
  // that the next Propose with this context drafts at once; returns how many it took in (0 for
  // sources that keep no state). Apart from Propose so that the speculator can time catching up
  // and drafting apart: they cost differently (a feed of many tokens, single steps). The
  // speculator also calls it with the prompt while the model takes in the prompt (a draft
  // model's prompt pass), so that the first draft need not: a source that must catch up on a
  // whole prompt before its first draft makes that draft, and the probe deciding whether
  // drafting pays, cost several plain steps.
  virtual Result<size_t> CatchUp(std::span<const int32_t> context) {
    (void)context;
    return size_t{0};
  }
  // Forgets what earlier calls left behind (a draft model's cached tokens), as if new.
  virtual void Reset() {}
};

}  // namespace petrel
