// Engine::Step: per-sequence admission of a mixed batch (prompt chunks and single-token
// decodes), one forward pass through Decode, and per-sequence results.
#include <algorithm>

#include "core/runtime/engine.h"

namespace petrel {
namespace {

size_t BlocksFor(size_t tokens, size_t block_tokens) {
  return (tokens + block_tokens - 1) / block_tokens;
}

}  // namespace

Status Engine::Step(std::span<const StepInput> inputs, std::vector<StepOutput>* outputs) {
  const size_t n_inputs = inputs.size();
  outputs->resize(n_inputs);
  size_t total_tokens = 0;
  for (const StepInput& input : inputs) total_tokens += input.tokens.size();
  if (total_tokens > options_.max_batch_tokens) {
    const Status status = Error("step of %zu tokens exceeds the maximum of %zu", total_tokens,
                                options_.max_batch_tokens);
    for (StepOutput& output : *outputs) output = StepOutput{status, {}};
    return status;
  }
  if (Records()) {
    calls_.Call(EngineCall::kStep);
    calls_.Int(int64_t(n_inputs));
    for (const StepInput& input : inputs) {
      calls_.Int(input.seq);
      calls_.Int(input.want_logits ? 1 : 0);
      calls_.Array(input.tokens);
    }
    // The other stages need the call before this step's first pass sends them its rows.
    if (Status sent = SendCalls(); !sent.ok()) {
      for (StepOutput& output : *outputs) output = StepOutput{sent, {}};
      return sent;
    }
  }
  RecordScope scope(this);
  const int64_t n_vocab = model_->config.n_vocab;
  const size_t block_tokens = kv_->block_tokens();
  step_admitted_.clear();
  step_taken_.assign(n_inputs, 0);
  // Blocks promised to admitted inputs but still in the free list. An input is promised an
  // upper bound of what it needs (its new blocks, plus a private copy of a partly filled last
  // block in case that block is shared), which costs no allocation. Only when a bound does not
  // fit are blocks really taken, for that input and every one admitted before it, to learn
  // the exact need; they are given back below.
  size_t promised = 0;
  for (size_t i = 0; i < n_inputs; ++i) {
    const StepInput& input = inputs[i];
    StepOutput& output = (*outputs)[i];
    output.logits = {};
    output.status = Status::Ok();
    const SeqId seq = input.seq;
    const size_t n_new = input.tokens.size();
    if (n_new == 0) {
      output.status = Error("step input %zu: no tokens for sequence %d", i, seq);
      continue;
    }
    if (!kv_->HasSequence(seq)) {
      output.status = Error("step input %zu: sequence %d does not exist", i, seq);
      continue;
    }
    for (size_t j = 0; j < i && output.status.ok(); ++j) {
      if (inputs[j].seq == seq) {
        output.status =
            Error("step input %zu: sequence %d already appears in input %zu", i, seq, j);
      }
    }
    for (size_t t = 0; t < n_new && output.status.ok(); ++t) {
      const int32_t id = input.tokens[t];
      if (id < 0 || id >= n_vocab) {
        output.status = Error(
            "step input %zu (sequence %d): token %zu, id %d, is outside the "
            "vocabulary of %lld",
            i, seq, t, id, (long long)n_vocab);
      }
    }
    if (!output.status.ok()) continue;
    const size_t length = kv_->Length(seq);
    if (length + n_new > kv_->context()) {
      output.status = Error("sequence %d: %zu tokens exceed the context of %zu", seq,
                            length + n_new, kv_->context());
      continue;
    }
    const size_t bound = BlocksFor(length + n_new, block_tokens) - BlocksFor(length, block_tokens) +
                         (length % block_tokens != 0 ? 1 : 0);
    if (bound <= kv_->free_blocks() - promised) {
      promised += bound;
      step_admitted_.push_back(i);
      continue;
    }
    // Exact: take the blocks of the inputs admitted so far, whose bounds may overstate their
    // need, and then this input's.
    for (size_t k : step_admitted_) {
      if (step_taken_[k]) continue;
      const bool taken = kv_->Append(inputs[k].seq, inputs[k].tokens.size()).ok();
      PETREL_CHECK(taken);  // its bound was free
      step_taken_[k] = 1;
    }
    promised = 0;
    auto appended = kv_->Append(seq, n_new);
    if (!appended.ok()) {
      output.status = appended.status();
      continue;
    }
    step_taken_[i] = 1;
    step_admitted_.push_back(i);
  }
  // Give back the blocks taken to test a fit; Decode takes them again. A private copy of a
  // shared last block stays (same contents), so the sequence needs one block less next time.
  for (size_t i : step_admitted_) {
    if (step_taken_[i]) {
      (void)kv_->Truncate(inputs[i].seq, kv_->Length(inputs[i].seq) - inputs[i].tokens.size());
    }
  }
  if (step_admitted_.empty()) return Status::Ok();

  step_batch_.Clear();
  for (size_t i : step_admitted_) {
    const StepInput& input = inputs[i];
    const size_t length = kv_->Length(input.seq);
    const size_t n_new = input.tokens.size();
    for (size_t t = 0; t < n_new; ++t) {
      step_batch_.Add(input.tokens[t], int32_t(length + t), input.seq,
                      input.want_logits && t + 1 == n_new);
    }
  }
  const Status status = Decode(step_batch_, &step_logits_);
  if (!status.ok()) {
    for (size_t i : step_admitted_) (*outputs)[i].status = status;
    return status;
  }
  size_t row = 0;
  for (size_t i : step_admitted_) {
    if (!inputs[i].want_logits) continue;
    (*outputs)[i].logits =
        std::span<const float>(step_logits_.data() + row * size_t(n_vocab), size_t(n_vocab));
    ++row;
  }
  return Status::Ok();
}

}  // namespace petrel
