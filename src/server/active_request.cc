// ActiveRequest: choices as Sequences, shared-prompt forking, events and latency metrics.
#include "server/active_request.h"

#include <algorithm>

namespace petrel::server {
namespace {

// OpenAI's finish reasons; "cancelled" and "error" are never reported as one.
const char* FinishReason(const std::string& stop_reason) {
  return stop_reason == "eos" || stop_reason == "stop" ? "stop" : "length";
}

}  // namespace

size_t ActiveRequest::BlocksNeeded(const Engine& engine, const Job& job) {
  const size_t context = engine.context();
  const size_t wanted = job.request().max_tokens ? job.request().max_tokens : context;
  const size_t tokens = std::min(context, job.prompt().size() + wanted);
  const size_t block = engine.kv_block_tokens();
  return job.request().n * ((tokens + block - 1) / block);
}

size_t ActiveRequest::BlocksToStart(const Engine& engine, const Job& job) {
  const std::vector<int32_t>& prompt = job.prompt();
  const std::span<const int32_t> cacheable =
      std::span<const int32_t>(prompt).first(prompt.empty() ? 0 : prompt.size() - 1);
  const KvPrefixMatch cached = engine.FindCachedPrefix(cacheable, job.request().lora_scales);
  const size_t block = engine.kv_block_tokens();
  const size_t blocks = (prompt.size() + block - 1) / block - cached.blocks;
  return blocks + cached.idle_blocks + job.request().n;
}

size_t ActiveRequest::BlocksToResume() const {
  const size_t block = engine_.kv_block_tokens();
  size_t total = 0;
  if (parent_ < 0 && !choices_.empty() && !choices_[0]->sequence) {  // preempted while sharing
    const KvPrefixMatch cached = engine_.FindCachedPrefix(shared_, job_->request().lora_scales);
    total += (shared_.size() + block - 1) / block - cached.blocks + cached.idle_blocks;
    return total + choices_.size();
  }
  for (const auto& choice : choices_) {
    if (!choice->sequence || choice->sequence->finished()) continue;
    const std::vector<int32_t>& held = choice->sequence->held();
    const KvPrefixMatch cached = engine_.FindCachedPrefix(held, job_->request().lora_scales);
    total += (held.size() + block) / block - cached.blocks + cached.idle_blocks + 1;
  }
  return total;
}

size_t ActiveRequest::Preempt() {
  size_t sequences = 0;
  if (parent_ >= 0) {
    engine_.FreeSequence(parent_);
    parent_ = -1;
    shared_fed_ = 0;
    shared_pending_ = 0;
    sequences = choices_.size();
  }
  for (auto& choice : choices_) {
    if (choice->seq < 0) continue;
    engine_.FreeSequence(choice->seq);
    choice->seq = -1;
    ++sequences;
  }
  preempted_ = true;
  return sequences;
}

bool ActiveRequest::Resume() {
  preempted_ = false;
  Status status = Status::Ok();
  size_t reused = 0;
  if (!choices_.empty() && !choices_[0]->sequence) {  // preempted while sharing the prefill
    parent_ = engine_.NewSequenceFromCache(shared_, &reused, job_->request().lora_scales);
    shared_fed_ = reused;
    if (!sharing_prefill()) status = ForkChoices();
  } else {
    for (auto& choice : choices_) {
      if (!choice->sequence || choice->sequence->finished() || choice->seq >= 0) continue;
      size_t choice_reused = 0;
      choice->seq = engine_.NewSequenceFromCache(choice->sequence->held(), &choice_reused,
                                                 job_->request().lora_scales);
      reused += choice_reused;
      status = choice->sequence->Resume(choice->seq);
      if (!status.ok()) break;
    }
  }
  if (reused > 0) metrics_.AddPrefixCacheHit(reused / engine_.kv_block_tokens(), reused);
  if (!status.ok()) {
    const ApiError error = StatusError(500, status.message());
    Abort(&error);
    return false;
  }
  return true;
}

Result<std::unique_ptr<ActiveRequest>> ActiveRequest::Start(Engine& engine,
                                                            std::shared_ptr<Job> job,
                                                            Metrics& metrics) {
  std::unique_ptr<ActiveRequest> request(new ActiveRequest(engine, std::move(job), metrics));
  ActiveRequest& r = *request;
  const std::vector<int32_t>& prompt = r.job_->prompt();
  const size_t n = r.job_->request().n;
  r.usage_.prompt_tokens = prompt.size();
  r.choices_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    r.choices_.push_back(std::make_unique<Choice>());
    r.choices_.back()->index = i;
  }
  // The cache may hold any whole blocks of the prompt but the last token, which is fed to get
  // the first logits.
  const std::span<const int32_t> cacheable =
      std::span<const int32_t>(prompt).first(prompt.empty() ? 0 : prompt.size() - 1);
  size_t reused = 0;
  if (n > 1 && prompt.size() > 1) {
    r.parent_ = engine.NewSequenceFromCache(cacheable, &reused, r.job_->request().lora_scales);
    r.shared_.assign(prompt.begin(), prompt.end() - 1);
    r.shared_fed_ = reused;
  } else {
    for (size_t i = 0; i < n; ++i) {
      const SeqId seq = engine.NewSequenceFromCache(cacheable, &reused, r.job_->request().lora_scales);
      PETREL_RETURN_IF_ERROR(
          r.StartChoice(i, seq, std::vector<int32_t>(prompt.begin() + long(reused), prompt.end()),
                        cacheable.first(reused)));
    }
  }
  r.usage_.cached_tokens = reused;
  metrics.ObserveQueueTime(std::chrono::duration<double>(Clock::now() - r.job_->arrival()).count());
  if (reused > 0) metrics.AddPrefixCacheHit(reused / engine.kv_block_tokens(), reused);
  metrics.AddPromptTokens(prompt.size());
  // The whole shared prompt came from the cache: the choices start at once.
  if (r.parent_ >= 0 && !r.sharing_prefill()) PETREL_RETURN_IF_ERROR(r.ForkChoices());
  return request;
}

ActiveRequest::~ActiveRequest() { FreeSequences(); }

void ActiveRequest::DescribeSlots(std::vector<SlotInfo>* out) const {
  if (finished_) return;
  SlotInfo slot;
  slot.request_id = job_->id();
  slot.n_prompt = usage_.prompt_tokens;
  slot.n_cached = usage_.cached_tokens;
  if (sharing_prefill() || (preempted_ && !choices_.empty() && !choices_[0]->sequence)) {
    slot.id = parent_;
    slot.state = preempted_ ? "preempted" : "prefill";
    slot.position = shared_fed_;
    out->push_back(slot);
    return;
  }
  for (const auto& choice : choices_) {
    if (choice->reported || !choice->sequence) continue;
    const Sequence& sequence = *choice->sequence;
    slot.id = preempted_ ? -1 : choice->seq;
    slot.choice = choice->index;
    slot.state = preempted_ ? "preempted" : sequence.prefilling() ? "prefill" : "decode";
    slot.position = preempted_ ? 0 : sequence.held().size();
    slot.n_generated = sequence.result().new_ids.size();
    out->push_back(slot);
  }
}

void ActiveRequest::FreeSequences() {
  if (parent_ >= 0) engine_.FreeSequence(parent_);
  parent_ = -1;
  for (auto& choice : choices_) {
    if (choice->seq >= 0) engine_.FreeSequence(choice->seq);
    choice->seq = -1;
  }
}

GenerateOptions ActiveRequest::ChoiceOptions(size_t index) const {
  const CompletionRequest& request = job_->request();
  GenerateOptions options;
  // Without max_tokens a choice runs until the context is full (reported as "length").
  options.max_new_tokens = request.max_tokens ? request.max_tokens : engine_.context();
  options.stop = request.stop;
  options.sampling = request.sampling;
  options.sampling.seed = request.sampling.seed + index;  // choices differ, each reproducible
  // Harmony's channel markers are special tokens the reply parser reads.
  options.skip_special = !request.reply.harmony;
  options.context = engine_.context();
  options.context_shift = false;
  return options;
}

Status ActiveRequest::StartChoice(size_t index, SeqId seq, std::vector<int32_t> prompt,
                                  std::span<const int32_t> cached) {
  Choice& choice = *choices_[index];
  choice.seq = seq;  // owned from here, freed on every path
  choice.filter = std::make_unique<EndTextFilter>(engine_.tokenizer(), false);
  auto on_token = [this, &choice](const GeneratedToken& token, std::string_view piece) {
    return OnToken(choice, token, piece);
  };
  PETREL_ASSIGN_OR_RETURN(
      choice.sequence,
      Sequence::Create(engine_, seq, std::move(prompt), ChoiceOptions(index), on_token, cached));
  return Status::Ok();
}

size_t ActiveRequest::running_sequences() const {
  if (finished_) return 0;
  if (sharing_prefill()) return choices_.size();
  return size_t(std::count_if(choices_.begin(), choices_.end(),
                              [](const auto& choice) { return !choice->reported; }));
}

StepInput ActiveRequest::NextSharedInput(size_t max_tokens) {
  shared_pending_ = std::min(max_tokens, shared_.size() - shared_fed_);
  return StepInput{parent_, std::span<const int32_t>(shared_).subspan(shared_fed_, shared_pending_),
                   false};
}

bool ActiveRequest::ConsumeShared(const StepOutput& output) {
  if (!output.status.ok()) {
    const ApiError error = StatusError(500, output.status.message());
    Abort(&error);
    return false;
  }
  shared_fed_ += shared_pending_;
  shared_pending_ = 0;
  engine_.CacheSequenceBlocks(parent_, std::span<const int32_t>(shared_).first(shared_fed_));
  if (sharing_prefill()) return true;
  const Status forked = ForkChoices();
  if (!forked.ok()) {
    const ApiError error = StatusError(500, forked.message());
    Abort(&error);
    return false;
  }
  return true;
}

Status ActiveRequest::ForkChoices() {
  const int32_t last = job_->prompt().back();
  for (size_t i = 0; i < choices_.size(); ++i) {
    PETREL_ASSIGN_OR_RETURN(const SeqId child, engine_.ForkSequence(parent_));
    PETREL_RETURN_IF_ERROR(StartChoice(i, child, {last}, shared_));
  }
  engine_.FreeSequence(parent_);
  parent_ = -1;
  return Status::Ok();
}

void ActiveRequest::CacheBlocks(const Sequence& sequence) {
  engine_.CacheSequenceBlocks(sequence.seq(), sequence.held());
}

void ActiveRequest::LiveSequences(std::vector<Sequence*>* out) const {
  for (const auto& choice : choices_) {
    if (choice->sequence && !choice->sequence->finished()) out->push_back(choice->sequence.get());
  }
}

bool ActiveRequest::OnToken(Choice& choice, const GeneratedToken& token, std::string_view piece) {
  if (token.id >= 0) {
    const Clock::time_point now = Clock::now();
    if (!first_token_seen_) {
      metrics_.ObserveTimeToFirstToken(
          std::chrono::duration<double>(now - job_->arrival()).count());
      first_token_seen_ = true;
    }
    if (choice.has_token) {
      metrics_.ObserveInterTokenLatency(
          std::chrono::duration<double>(now - choice.last_token).count());
    }
    choice.last_token = now;
    choice.has_token = true;
    if (job_->request().logprobs) choice.pending.push_back(token);
  }
  std::string text = choice.filter->Push(piece);
  if (!text.empty()) {
    job_->Push(JobEvent{JobEvent::Kind::kDelta, choice.index, std::move(text),
                        std::move(choice.pending), "", Usage(), ApiError(), ""});
    choice.pending.clear();
  }
  return !job_->cancelled();
}

bool ActiveRequest::Report() {
  if (finished_) return true;
  for (auto& choice_ptr : choices_) {
    Choice& choice = *choice_ptr;
    if (choice.reported || !choice.sequence || !choice.sequence->finished()) continue;
    Sequence& sequence = *choice.sequence;
    if (!sequence.status().ok()) {
      const ApiError error = StatusError(500, sequence.status().message());
      Abort(&error);
      return true;
    }
    if (sequence.result().stop_reason == "cancelled") {
      Abort(nullptr);
      return true;
    }
    std::string tail = choice.filter->Flush();
    if (!tail.empty() || !choice.pending.empty()) {
      job_->Push(JobEvent{JobEvent::Kind::kDelta, choice.index, std::move(tail),
                          std::move(choice.pending), "", Usage(), ApiError(), ""});
      choice.pending.clear();
    }
    JobEvent end;
    end.kind = JobEvent::Kind::kChoiceEnd;
    end.choice = choice.index;
    end.finish_reason = FinishReason(sequence.result().stop_reason);
    if (sequence.result().stop_reason == "stop") end.stop_sequence = sequence.result().stop_string;
    job_->Push(std::move(end));
    const size_t generated = sequence.result().new_ids.size();
    usage_.completion_tokens += generated;
    metrics_.AddGenerationTokens(generated);
    engine_.FreeSequence(choice.seq);
    choice.seq = -1;
    choice.reported = true;
  }
  if (sharing_prefill()) return false;
  const bool all = std::all_of(choices_.begin(), choices_.end(),
                               [](const auto& choice) { return choice->reported; });
  if (!all) return false;
  job_->Push(JobEvent{JobEvent::Kind::kDone, 0, "", {}, "", usage_, ApiError(), ""});
  metrics_.ObserveRequestTokens(usage_.prompt_tokens, usage_.cached_tokens,
                                usage_.completion_tokens);
  finished_ = true;
  return true;
}

void ActiveRequest::Abort(const ApiError* error) {
  for (auto& choice : choices_) {
    if (choice->sequence) choice->sequence->Cancel();
  }
  FreeSequences();
  if (error && !finished_) {
    job_->Push(JobEvent{JobEvent::Kind::kError, 0, "", {}, "", Usage(), *error, ""});
  }
  finished_ = true;
}

}  // namespace petrel::server
