// Speculative decoding: a draft source proposes k tokens, the model verifies them in one
// forward pass (the logits of all k + 1 positions), and the longest prefix that the acceptance
// rule lets stand is kept; the rejected tokens' K/V is dropped by truncating the sequence in
// the paged cache. Because the kernels are batch-invariant, the k + 1 positions get the logits
// k + 1 single steps would get, so greedy output is the plain decoding's token for token, and
// sampled output follows the model's distribution exactly (SamplerChain::SampleDraft).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/generation/draft_source.h"
#include "core/generation/sequence.h"
#include "core/runtime/engine.h"

namespace petrel {

struct SpeculationOptions {
  // The draft length adapts between these to the running acceptance rate: long while drafts
  // stand, short while they are rejected (each rejected position costs verification work).
  size_t draft_min = 1;
  size_t draft_max = 8;
};

class Speculator {
 public:
  // Fails when draft_min is 0 or above draft_max.
  static Result<std::unique_ptr<Speculator>> Create(std::unique_ptr<DraftSource> source,
                                                    const SpeculationOptions& options);
  DraftSource& source() { return *source_; }
  // The draft length for the next pass: the longest whose last token the running acceptance
  // rate a still reaches with probability a^k >= 0.2, within [draft_min, draft_max].
  size_t NextLength() const;
  // Records one verification: `drafted` tokens proposed, the first `accepted` of them kept.
  void Record(size_t drafted, size_t accepted);
  // Starts afresh: the source's state and the acceptance estimate.
  void Reset();
  // One speculative step of a sampling `sequence`: a draft, verified in one forward pass of
  // that sequence alone, and consumed (Sequence::ConsumeDraft). False, changing nothing, when
  // there is no draft (none proposed, no room, or no free KV blocks for it): the caller then
  // steps the sequence as usual. A failure finishes the sequence with reason "error".
  bool Step(Engine& engine, Sequence& sequence);
  // The running per-token acceptance estimate in [0, 1].
  double acceptance_rate() const { return rate_; }

 private:
  Speculator(std::unique_ptr<DraftSource> source, const SpeculationOptions& options)
      : source_(std::move(source)), options_(options) {}
  std::unique_ptr<DraftSource> source_;
  SpeculationOptions options_;
  // Exponentially decayed counts of verified drafted positions and of those accepted: each
  // verification observes its accepted tokens and, when it rejected one, that one.
  double trials_ = 0.0, accepted_ = 0.0;
  double rate_ = 1.0;  // optimistic at first: the first drafts are full length
  // Step's scratch, kept so that a steady loop allocates only in the forward pass.
  std::vector<int32_t> context_;
  Draft draft_;
  Batch batch_;
  std::vector<float> logits_;
};

// Runs `sequence` to its end as RunSequences does alone, but while it samples, each step
// verifies a draft from `speculator` (when it has one) in one forward pass. With a null
// speculator it is RunSequences. Failures, the draft source's included, finish the sequence
// with reason "error".
void RunSpeculative(Engine& engine, Sequence& sequence, Speculator* speculator);

}  // namespace petrel
