// The engine's calls when the first pipeline stage leads: recording them on the first stage,
// replaying them on the others (engine_calls.h), and the pipelined Decode whose passes are in
// flight together.
#include "core/runtime/engine_calls.h"

#include <algorithm>

#include "core/runtime/engine.h"

namespace petrel {

SeqId Engine::NewSequence() {
  const SeqId seq = kv_->NewSequence(LoraKey({}));
  if (Records()) {
    calls_.Call(EngineCall::kNewSequence);
    calls_.Int(seq);
  }
  return seq;
}

void Engine::FreeSequence(SeqId seq) {
  if (Records()) {
    calls_.Call(EngineCall::kFreeSequence);
    calls_.Int(seq);
  }
  kv_->FreeSequence(seq);
  seq_lora_.erase(seq);
}

Status Engine::TruncateSequence(SeqId seq, size_t length) {
  if (Records()) {
    calls_.Call(EngineCall::kTruncateSequence);
    calls_.Int(seq);
    calls_.Int(int64_t(length));
  }
  return kv_->Truncate(seq, length);
}

void Engine::CacheSequenceBlocks(SeqId seq, std::span<const int32_t> tokens) {
  if (Records()) {
    // Only whole blocks are cached: the tail of a partly filled block changes nothing.
    const size_t whole = tokens.size() / kv_->block_tokens() * kv_->block_tokens();
    calls_.Call(EngineCall::kCacheSequenceBlocks);
    calls_.Int(seq);
    calls_.Array(tokens.first(whole));
  }
  kv_->CacheBlocks(seq, tokens);
}

Status Engine::SendCalls() {
  if (calls_.empty()) return Status::Ok();
  const Status sent = options_.pipeline->SendCalls(calls_.bytes());
  calls_.Clear();
  return sent;
}

Status Engine::StopFollowers() {
  if (!leads()) return Status::Ok();
  calls_.Call(EngineCall::kStop);
  return SendCalls();
}

Status Engine::FollowFirstStage() {
  if (!first_stage_leads() || options_.pipeline->rank() == 0) {
    return Error("FollowFirstStage: this process does not follow a pipeline's first stage");
  }
  for (;;) {
    PETREL_RETURN_IF_ERROR(options_.pipeline->ReceiveCalls(&calls_in_));
    CallReader reader(calls_in_);
    bool stop = false;
    while (!reader.done() && !stop) PETREL_RETURN_IF_ERROR(ReplayCall(reader, &stop));
    if (!reader.ok()) {
      return Error("rank %d: a malformed message of engine calls", options_.pipeline->rank());
    }
    if (stop) return Status::Ok();
  }
}

Status Engine::ReplayCall(CallReader& reader, bool* stop) {
  const int rank = options_.pipeline->rank();
  // A result that differs from the first stage's means the caches have diverged, and every
  // later pass would read the wrong K/V rows: the follower stops instead.
  auto expect = [&](int64_t mine, int64_t leader, const char* what) -> Status {
    if (mine == leader) return Status::Ok();
    return Error("rank %d: %s gave %lld here but %lld on rank 0 (the KV caches differ)", rank, what,
                 (long long)mine, (long long)leader);
  };
  switch (reader.Call()) {
    case EngineCall::kNewSequence: {
      const SeqId seq = NewSequence();
      return expect(seq, reader.Int(), "NewSequence");
    }
    case EngineCall::kFreeSequence: {
      const SeqId seq = SeqId(reader.Int());
      if (!reader.ok()) return Status::Ok();
      FreeSequence(seq);
      return Status::Ok();
    }
    case EngineCall::kForkSequence: {
      const SeqId seq = SeqId(reader.Int());
      const Result<SeqId> child = ForkSequence(seq);
      return expect(child.ok() ? *child : -1, reader.Int(), "ForkSequence");
    }
    case EngineCall::kTruncateSequence: {
      const SeqId seq = SeqId(reader.Int());
      const int64_t length = reader.Int();
      if (reader.ok()) (void)TruncateSequence(seq, size_t(length));  // fails alike on rank 0
      return Status::Ok();
    }
    case EngineCall::kSetSequenceLora: {
      const SeqId seq = SeqId(reader.Int());
      const std::vector<float> scales = reader.Array<float>();
      if (reader.ok()) (void)SetSequenceLora(seq, scales);
      return Status::Ok();
    }
    case EngineCall::kNewSequenceFromCache: {
      const std::vector<int32_t> tokens = reader.Array<int32_t>();
      const std::vector<float> scales = reader.Array<float>();
      const int64_t leader = reader.Int();
      if (!reader.ok()) return Status::Ok();
      size_t reused = 0;
      return expect(NewSequenceFromCache(tokens, &reused, scales), leader, "NewSequenceFromCache");
    }
    case EngineCall::kCacheSequenceBlocks: {
      const SeqId seq = SeqId(reader.Int());
      const std::vector<int32_t> tokens = reader.Array<int32_t>();
      if (reader.ok()) CacheSequenceBlocks(seq, tokens);
      return Status::Ok();
    }
    case EngineCall::kStep: {
      const int64_t n_inputs = reader.Int();
      if (n_inputs < 0 || n_inputs > int64_t(options_.max_batch_tokens)) return Status::Ok();
      replay_tokens_.resize(size_t(n_inputs));
      replay_inputs_.resize(size_t(n_inputs));
      for (size_t i = 0; i < size_t(n_inputs); ++i) {
        replay_inputs_[i].seq = SeqId(reader.Int());
        replay_inputs_[i].want_logits = reader.Int() != 0;
        replay_tokens_[i] = reader.Array<int32_t>();
        replay_inputs_[i].tokens = replay_tokens_[i];
      }
      if (!reader.ok()) return Status::Ok();
      // The admission decisions are the first stage's, made again from the same cache; a
      // failed pass is a failed link, which ends the follower.
      const Status status = Step(replay_inputs_, &replay_outputs_);
      return options_.pipeline->failed() ? status : Status::Ok();
    }
    case EngineCall::kDecode: {
      replay_batch_.Clear();
      replay_batch_.tokens = reader.Array<int32_t>();
      replay_batch_.positions = reader.Array<int32_t>();
      replay_batch_.seq_ids = reader.Array<SeqId>();
      replay_batch_.want_logits = reader.Array<uint8_t>();
      replay_batch_.hidden_output = reader.Int() != 0;
      if (!reader.ok()) return Status::Ok();
      const Status status = Decode(replay_batch_, &replay_logits_);
      return options_.pipeline->failed() ? status : Status::Ok();
    }
    case EngineCall::kStop:
      *stop = true;
      return Status::Ok();
    case EngineCall::kCount:
      break;
  }
  return Error("rank %d: an unknown engine call", rank);
}

Status Engine::DecodePipelined(const Batch& batch, std::vector<float>* logits) {
  if (batch.positions.size() != batch.size() || batch.seq_ids.size() != batch.size() ||
      batch.want_logits.size() != batch.size()) {
    return Error("batch arrays have different lengths");
  }
  // Passes of (nearly) equal size: with one per stage, stage r + 1 runs pass k while stage r
  // runs pass k + 1. Each pass reads every weight of the stage once more, so more passes than
  // stages would cost reads without filling any more stages.
  const size_t n_ranks = size_t(options_.pipeline->n_ranks());
  const size_t wanted = options_.pipeline_micro_batches ? options_.pipeline_micro_batches : n_ranks;
  const size_t n_passes =
      std::max<size_t>({size_t(1), std::min(wanted, batch.size()),
                        (batch.size() + options_.ubatch_tokens - 1) / options_.ubatch_tokens});
  const size_t pass_tokens = (batch.size() + n_passes - 1) / n_passes;
  lengths_before_.clear();
  for (SeqId seq : batch.seq_ids) {
    if (!kv_->HasSequence(seq)) continue;
    bool seen = false;
    for (const auto& [known, length] : lengths_before_) seen = seen || known == seq;
    if (!seen) lengths_before_.emplace_back(seq, kv_->Length(seq));
  }
  if (pass_outputs_.size() < n_passes) pass_outputs_.resize(n_passes);
  Status status = Status::Ok();
  size_t passes_run = 0;
  for (size_t begin = 0; begin < batch.size() && status.ok(); begin += pass_tokens) {
    const size_t end = std::min(batch.size(), begin + pass_tokens);
    part_.Clear();
    part_.hidden_output = batch.hidden_output;
    for (size_t t = begin; t < end; ++t) {
      part_.Add(batch.tokens[t], batch.positions[t], batch.seq_ids[t], batch.want_logits[t] != 0);
    }
    status = DecodeChunk(part_, begin, &pass_outputs_[passes_run]);
    ++passes_run;
  }
  // The first stage's output receives were posted pass by pass (RunStage); they end here.
  if (status.ok() && options_.pipeline->rank() == 0) status = options_.pipeline->WaitOutputs();
  if (!status.ok()) {
    for (const auto& [seq, length] : lengths_before_) (void)kv_->Truncate(seq, length);
    return status;
  }
  if (logits) {
    logits->clear();
    for (size_t k = 0; k < passes_run; ++k) {
      logits->insert(logits->end(), pass_outputs_[k].begin(), pass_outputs_[k].end());
    }
  }
  return Status::Ok();
}

}  // namespace petrel
