// Speculative decoding: a draft source proposes k tokens, the model verifies them in one
// forward pass (the logits of all k + 1 positions), and the longest prefix that the acceptance
// rule lets stand is kept; the rejected tokens' K/V is dropped by truncating the sequence in
// the paged cache. Because the kernels are batch-invariant, the k + 1 positions get the logits
// k + 1 single steps would get, so greedy output is the plain decoding's token for token, and
// sampled output follows the model's distribution exactly (SamplerChain::SampleDraft).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "core/generation/draft_length.h"
#include "core/generation/draft_source.h"
#include "core/generation/sequence.h"
#include "core/runtime/engine.h"

namespace petrel {

struct SpeculationOptions {
  // Each pass drafts the length in [draft_min, draft_max] that the measured costs say gives the
  // most tokens per second (DraftLengthChooser); with draft_min 0 that may be none at all, so
  // a draft that does not pay costs only occasional probes. draft_min > 0 forces at least that
  // many drafted tokens per pass.
  size_t draft_min = 0;
  size_t draft_max = 8;
  // Seconds on a monotonic clock; null: std::chrono::steady_clock. Tests drive the choice with
  // a fake one.
  std::function<double()> clock = nullptr;
};

class Speculator {
 public:
  // Fails when draft_max is 0 or draft_min is above it.
  static Result<std::unique_ptr<Speculator>> Create(std::unique_ptr<DraftSource> source,
                                                    const SpeculationOptions& options);
  DraftSource& source() { return *source_; }
  DraftLengthChooser& chooser() { return chooser_; }
  // Starts afresh: the source's state, the measurements and the counts of chosen lengths.
  void Reset();
  // One speculative step of a sampling `sequence`: a draft of the chosen length, verified in
  // one forward pass of that sequence alone, and consumed (Sequence::ConsumeDraft). False,
  // changing nothing, when it does not draft (the chosen length is 0, no room, none proposed,
  // or no free KV blocks for it): the caller then steps the sequence as usual, and should time
  // that step for RecordPlainStep. A failure finishes the sequence with reason "error".
  bool Step(Engine& engine, Sequence& sequence);
  // The draft source takes in `prompt` (DraftSource::CatchUp), during the model's prompt pass;
  // RunSpeculative calls it before the last chunk of a sequence's prompt. A failure finishes
  // the sequence with reason "error".
  void Prime(Sequence& sequence, std::span<const int32_t> prompt);
  // A plain decode step of one sampling sequence alone took `seconds` (of Now()).
  void RecordPlainStep(double seconds) { chooser_.RecordPass(1, seconds); }
  double Now() const;
  // draft_lengths()[k]: the steps that drafted k tokens since Create or Reset (0: plain steps
  // taken because drafting did not pay, or no draft was proposed).
  const std::vector<size_t>& draft_lengths() const { return lengths_; }

 private:
  Speculator(std::unique_ptr<DraftSource> source, const SpeculationOptions& options)
      : source_(std::move(source)),
        options_(options),
        chooser_(options.draft_min, options.draft_max),
        lengths_(options.draft_max + 1, 0) {}
  std::unique_ptr<DraftSource> source_;
  SpeculationOptions options_;
  DraftLengthChooser chooser_;
  std::vector<size_t> lengths_;
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
