// Speculator (adaptive draft length) and RunSpeculative (draft, verify, keep, roll back).
#include "core/generation/speculative.h"

#include <algorithm>
#include <cmath>

namespace petrel {
namespace {

// Weight of the past in the acceptance estimate, per verification: about the last ten passes
// count, so that the length follows a text whose predictability changes.
constexpr double kDecay = 0.9;
// The draft is as long as its last token is still reached with this probability.
constexpr double kReach = 0.2;

}  // namespace

Result<std::unique_ptr<Speculator>> Speculator::Create(std::unique_ptr<DraftSource> source,
                                                       const SpeculationOptions& options) {
  if (options.draft_min == 0) return Error("the draft length's minimum must be at least 1");
  if (options.draft_min > options.draft_max) {
    return Error("the draft length's minimum %zu exceeds its maximum %zu", options.draft_min,
                 options.draft_max);
  }
  return std::unique_ptr<Speculator>(new Speculator(std::move(source), options));
}

size_t Speculator::NextLength() const {
  size_t length = options_.draft_max;
  if (rate_ <= 0.0) {
    length = options_.draft_min;
  } else if (rate_ < 1.0) {
    const double reach = std::floor(std::log(kReach) / std::log(rate_));
    length =
        reach >= double(options_.draft_max) ? options_.draft_max : size_t(std::max(0.0, reach));
  }
  return std::clamp(length, options_.draft_min, options_.draft_max);
}

void Speculator::Reset() {
  source_->Reset();
  trials_ = accepted_ = 0.0;
  rate_ = 1.0;
}

void Speculator::Record(size_t drafted, size_t accepted) {
  if (drafted == 0) return;
  const size_t trials = accepted < drafted ? accepted + 1 : accepted;
  trials_ = kDecay * trials_ + double(trials);
  accepted_ = kDecay * accepted_ + double(accepted);
  rate_ = trials_ > 0.0 ? accepted_ / trials_ : 1.0;
}

bool Speculator::Step(Engine& engine, Sequence& sequence) {
  if (!sequence.sampling()) return false;
  const size_t max_batch = engine.options().max_batch_tokens;
  const size_t length =
      std::min({NextLength(), sequence.DraftRoom(), max_batch > 0 ? max_batch - 1 : 0});
  if (length == 0) return false;
  std::vector<int32_t>& context = context_;
  Draft& draft = draft_;
  Batch& batch = batch_;
  std::vector<float>& logits = logits_;
  context.assign(sequence.held().begin(), sequence.held().end());
  context.push_back(sequence.last_token());
  if (Status status = source_->Propose(context, length, &draft); !status.ok()) {
    sequence.Abort(std::move(status));
    return true;
  }
  const size_t n = std::min(draft.tokens.size(), length);
  const SeqId seq = sequence.seq();
  if (n == 0 || engine.KvBlocksToAppend(seq, n + 1) > engine.kv_free_blocks()) return false;
  const size_t start = engine.SequenceLength(seq);
  batch.Clear();
  batch.Add(sequence.last_token(), int32_t(start), seq, true);
  for (size_t i = 0; i < n; ++i) batch.Add(draft.tokens[i], int32_t(start + 1 + i), seq, true);
  if (Status status = engine.Decode(batch, &logits); !status.ok()) {
    sequence.Abort(std::move(status));
    return true;
  }
  const std::span<const int32_t> tokens(draft.tokens.data(), n);
  const std::span<const float> probs =
      draft.probs.empty() ? std::span<const float>()
                          : std::span<const float>(draft.probs.data(),
                                                   n * draft.probs.size() / draft.tokens.size());
  const size_t accepted = sequence.ConsumeDraft(logits, tokens, probs);
  Record(n, accepted);
  return true;
}

void RunSpeculative(Engine& engine, Sequence& sequence, Speculator* speculator) {
  std::vector<StepInput> inputs(1);
  std::vector<StepOutput> outputs;
  const size_t max_batch = engine.options().max_batch_tokens;
  while (!sequence.finished()) {
    if (speculator && speculator->Step(engine, sequence)) continue;
    inputs[0] = sequence.NextInput(max_batch);
    (void)engine.Step(inputs, &outputs);  // a failure is also in the output
    sequence.Consume(outputs[0]);
  }
}

}  // namespace petrel
