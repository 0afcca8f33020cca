// Speculator (draft length from measured costs) and RunSpeculative (draft, verify, keep, roll
// back, and time the plain steps in between).
#include "core/generation/speculative.h"

#include <algorithm>
#include <chrono>

namespace petrel {
Result<std::unique_ptr<Speculator>> Speculator::Create(std::unique_ptr<DraftSource> source,
                                                       const SpeculationOptions& options) {
  if (options.draft_max == 0) return Error("the draft length's maximum must be at least 1");
  if (options.draft_min > options.draft_max) {
    return Error("the draft length's minimum %zu exceeds its maximum %zu", options.draft_min,
                 options.draft_max);
  }
  return std::unique_ptr<Speculator>(new Speculator(std::move(source), options));
}

double Speculator::Now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Speculator::Reset() {
  source_->Reset();
  chooser_.Reset();
  std::fill(lengths_.begin(), lengths_.end(), 0);
}

void Speculator::Prime(Sequence& sequence, std::span<const int32_t> prompt) {
  const double start = Now();
  Result<size_t> fed = source_->CatchUp(prompt);
  if (!fed.ok()) {
    sequence.Abort(fed.status());
    return;
  }
  // The prompt's catch-up is the cost curve's long end: a probe after many plain steps is
  // weighed at the cost of such a feed, not at the few tokens' feeds measured so far.
  if (*fed > 0) chooser_.RecordCatchUp(*fed, Now() - start);
}

bool Speculator::Step(Engine& engine, Sequence& sequence) {
  if (!sequence.sampling()) return false;
  const size_t max_batch = engine.options().max_batch_tokens;
  const size_t room = std::min(sequence.DraftRoom(), max_batch > 0 ? max_batch - 1 : 0);
  const size_t length = chooser_.Choose(room);
  if (length == 0) {
    ++lengths_[0];
    return false;
  }
  std::vector<int32_t>& context = context_;
  Draft& draft = draft_;
  Batch& batch = batch_;
  std::vector<float>& logits = logits_;
  context.assign(sequence.held().begin(), sequence.held().end());
  context.push_back(sequence.last_token());
  // Catching up and drafting are timed apart: a draft of k tokens costs the catch-up on the
  // tokens the source is behind by, then k - 1 steps.
  const double catch_up_start = Now();
  Result<size_t> fed = source_->CatchUp(context);
  if (!fed.ok()) {
    sequence.Abort(fed.status());
    return true;
  }
  const double propose_start = Now();
  if (*fed > 0) chooser_.RecordCatchUp(*fed, propose_start - catch_up_start);
  if (Status status = source_->Propose(context, length, &draft); !status.ok()) {
    sequence.Abort(std::move(status));
    return true;
  }
  const size_t n = std::min(draft.tokens.size(), length);
  if (draft.steps > 0) chooser_.RecordDraft((Now() - propose_start) / double(draft.steps));
  const SeqId seq = sequence.seq();
  if (n == 0 || engine.KvBlocksToAppend(seq, n + 1) > engine.kv_free_blocks()) {
    ++lengths_[0];
    return false;
  }
  const size_t start = engine.SequenceLength(seq);
  batch.Clear();
  batch.Add(sequence.last_token(), int32_t(start), seq, true);
  for (size_t i = 0; i < n; ++i) batch.Add(draft.tokens[i], int32_t(start + 1 + i), seq, true);
  const double pass_start = Now();
  if (Status status = engine.Decode(batch, &logits); !status.ok()) {
    sequence.Abort(std::move(status));
    return true;
  }
  chooser_.RecordPass(n + 1, Now() - pass_start);
  const std::span<const int32_t> tokens(draft.tokens.data(), n);
  const std::span<const float> probs =
      draft.probs.empty() ? std::span<const float>()
                          : std::span<const float>(draft.probs.data(),
                                                   n * draft.probs.size() / draft.tokens.size());
  const size_t accepted = sequence.ConsumeDraft(logits, tokens, probs);
  chooser_.RecordVerification(n, accepted);
  ++lengths_[n];
  return true;
}

void RunSpeculative(Engine& engine, Sequence& sequence, Speculator* speculator) {
  std::vector<StepInput> inputs(1);
  std::vector<StepOutput> outputs;
  std::vector<int32_t> prompt;
  const size_t max_batch = engine.options().max_batch_tokens;
  while (!sequence.finished()) {
    if (speculator && speculator->Step(engine, sequence)) continue;
    // A plain step of a sampling sequence is the k = 0 the speculator weighs drafts against.
    const bool plain_step = speculator && sequence.sampling();
    const double start = plain_step ? speculator->Now() : 0.0;
    inputs[0] = sequence.NextInput(max_batch);
    if (speculator && !sequence.sampling() && inputs[0].want_logits) {
      // The prompt's last chunk: the draft source takes in the whole prompt now, so that its
      // prompt pass counts as prompt time, as the model's does, and the first draft or probe
      // costs a draft step rather than the prompt's catch-up.
      prompt.assign(sequence.held().begin(), sequence.held().end());
      prompt.insert(prompt.end(), inputs[0].tokens.begin(), inputs[0].tokens.end());
      speculator->Prime(sequence, prompt);
      if (sequence.finished()) break;
    }
    (void)engine.Step(inputs, &outputs);  // a failure is also in the output
    if (plain_step) speculator->RecordPlainStep(speculator->Now() - start);
    sequence.Consume(outputs[0]);
  }
}

}  // namespace petrel
