// Scheduler: admission by --parallel and free KV blocks, decodes before prompt chunks in each
// step's token budget, preemption of the newest request when blocks run out, cancellation at the
// top of every step.
#include "server/scheduler.h"

#include <algorithm>
#include <thread>

#include "core/base/log.h"

namespace petrel::server {

Scheduler::Scheduler(Engine& engine, const SchedulerOptions& options, Metrics& metrics)
    : engine_(engine), options_(options), metrics_(metrics) {}

Scheduler::~Scheduler() { Shutdown(std::chrono::milliseconds(0)); }

void Scheduler::Start() {
  PublishGauges();
  thread_ = std::thread([this] { Loop(); });
}

ApiResult Scheduler::Submit(std::shared_ptr<Job> job) {
  if (ActiveRequest::BlocksNeeded(engine_, *job) > engine_.kv_total_blocks()) {
    return StatusError(413, "the request needs more KV cache than the server has (" +
                                std::to_string(engine_.kv_total_blocks()) + " blocks of " +
                                std::to_string(engine_.kv_block_tokens()) +
                                " tokens); lower max_tokens or n");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!accepting_) return StatusError(503, "the server is shutting down");
    if (waiting_.size() >= options_.max_waiting) {
      return StatusError(429, "the request queue is full (" + std::to_string(options_.max_waiting) +
                                  " waiting); try again later");
    }
    waiting_.push_back(std::move(job));
  }
  wake_.notify_one();
  return std::nullopt;
}

bool Scheduler::RunBetweenSteps(std::function<void(Engine&)> task) {
  std::future<bool> ran;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!accepting_) return false;
    tasks_.push_back(Task{std::move(task), {}});
    ran = tasks_.back().done.get_future();
  }
  wake_.notify_one();
  return ran.get();
}

void Scheduler::RunTasks(bool run) {
  std::deque<Task> tasks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks.swap(tasks_);
  }
  for (Task& task : tasks) {
    if (run) task.run(engine_);
    task.done.set_value(run);
  }
}

void Scheduler::Shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    accepting_ = false;
    for (const auto& job : waiting_) {
      job->Push(JobEvent{JobEvent::Kind::kError,
                         0,
                         "",
                         {},
                         "",
                         Usage(),
                         StatusError(503, "the server is shutting down"),
                         ""});
    }
    waiting_.clear();
    if (!draining_) {
      draining_ = true;
      drain_deadline_ = Clock::now() + grace;
    }
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  RunTasks(false);  // a thread that never started leaves no caller waiting
}

size_t Scheduler::ActiveSequences(size_t* requests) const {
  size_t sequences = 0;
  if (requests) *requests = 0;
  for (const auto& request : active_) {
    if (request->finished() || request->preempted()) continue;
    sequences += request->running_sequences();
    if (requests) ++*requests;
  }
  return sequences;
}

bool Scheduler::ResumePreempted() {
  for (auto& request : active_) {
    if (request->finished() || !request->preempted()) continue;
    size_t running_requests = 0;
    const size_t running = ActiveSequences(&running_requests);
    // One block of growth for each running sequence stays free, so that the resumed request
    // is not preempted again at once; alone, it always fits (Submit checked it).
    if (running_requests > 0 && request->BlocksToResume() + running > engine_.kv_free_blocks()) {
      return true;
    }
    request->Resume();
  }
  return false;
}

void Scheduler::TakeAdmissible(std::vector<std::shared_ptr<Job>>* admitted) {
  size_t running = running_sequences_;
  size_t promised = 0;
  const size_t growth = ActiveSequences(nullptr);
  const bool idle = std::none_of(active_.begin(), active_.end(),
                                 [](const auto& request) { return !request->finished(); });
  while (!waiting_.empty()) {
    const std::shared_ptr<Job>& job = waiting_.front();
    if (job->cancelled()) {
      waiting_.pop_front();
      continue;
    }
    // First come, first served: a request that does not fit yet holds back those behind it,
    // so a long one is never starved by a stream of short ones.
    // Blocks are allocated as sequences grow; a request is admitted when its prompt (less
    // what the prefix cache holds) and one block per running sequence fit in the free blocks.
    // An idle server admits its first request whatever it needs (Submit checked that it fits).
    const size_t blocks = ActiveRequest::BlocksToStart(engine_, *job);
    const bool first = idle && admitted->empty();
    if (running + job->request().n > options_.parallel ||
        (!first && promised + blocks + growth > engine_.kv_free_blocks())) {
      break;
    }
    running += job->request().n;
    promised += blocks;
    admitted->push_back(job);
    waiting_.pop_front();
  }
}

void Scheduler::StartAdmitted(std::vector<std::shared_ptr<Job>>* admitted) {
  for (std::shared_ptr<Job>& job : *admitted) {
    auto request = ActiveRequest::Start(engine_, job, metrics_);
    if (!request.ok()) {
      job->Push(JobEvent{JobEvent::Kind::kError,
                         0,
                         "",
                         {},
                         "",
                         Usage(),
                         StatusError(400, request.status().message()),
                         ""});
      continue;
    }
    active_.push_back(std::move(request).value());
  }
  admitted->clear();
}

void Scheduler::DropCancelled() {
  for (auto& request : active_) {
    if (request->job().cancelled()) request->Abort(nullptr);
  }
}

size_t Scheduler::ChunkThatFits(SeqId seq, size_t tokens, size_t free_blocks) const {
  const size_t block = engine_.kv_block_tokens();
  while (tokens > 0 && engine_.KvBlocksToAppend(seq, tokens) > free_blocks) {
    const size_t length = engine_.SequenceLength(seq);
    const size_t room = free_blocks * block + (length % block ? block - length % block : 0);
    tokens = std::min(tokens - 1, room);
  }
  return tokens;
}

bool Scheduler::BuildStep() {
  inputs_.clear();
  feeds_.clear();
  size_t budget = options_.batch_tokens;
  const size_t free_blocks = engine_.kv_free_blocks();
  size_t blocks = 0;  // what the inputs so far will take
  // Decoding sequences first, one token each, so that their pace does not depend on the
  // prompts arriving; prompt chunks take what is left, oldest request first.
  for (auto& request : active_) {
    if (request->finished() || request->preempted()) continue;
    live_.clear();
    request->LiveSequences(&live_);
    for (Sequence* sequence : live_) {
      if (budget == 0 || sequence->prefilling()) continue;
      inputs_.push_back(sequence->NextInput(1));
      feeds_.push_back(Feed{request.get(), sequence});
      blocks += engine_.KvBlocksToAppend(sequence->seq(), 1);
      budget -= 1;
    }
  }
  if (blocks > free_blocks) return false;
  for (auto& request : active_) {
    if (budget == 0) break;
    if (request->finished() || request->preempted()) continue;
    if (request->sharing_prefill()) {
      StepInput input = request->NextSharedInput(budget);
      const size_t fits = ChunkThatFits(input.seq, input.tokens.size(), free_blocks - blocks);
      if (fits < input.tokens.size()) input = request->NextSharedInput(fits);
      if (input.tokens.empty()) continue;
      blocks += engine_.KvBlocksToAppend(input.seq, input.tokens.size());
      inputs_.push_back(input);
      feeds_.push_back(Feed{request.get(), nullptr});
      budget -= input.tokens.size();
      continue;
    }
    live_.clear();
    request->LiveSequences(&live_);
    for (Sequence* sequence : live_) {
      if (budget == 0 || !sequence->prefilling()) continue;
      const size_t fits = ChunkThatFits(sequence->seq(), budget, free_blocks - blocks);
      if (fits == 0) continue;
      const StepInput input = sequence->NextInput(fits);
      blocks += engine_.KvBlocksToAppend(input.seq, input.tokens.size());
      inputs_.push_back(input);
      feeds_.push_back(Feed{request.get(), sequence});
      budget -= input.tokens.size();
    }
  }
  return true;
}

bool Scheduler::PreemptNewest() {
  size_t running_requests = 0;
  ActiveSequences(&running_requests);
  if (running_requests < 2) return false;
  for (auto it = active_.rbegin(); it != active_.rend(); ++it) {
    ActiveRequest& request = **it;
    if (request.finished() || request.preempted()) continue;
    preempted_ += request.Preempt();
    return true;
  }
  return false;
}

bool Scheduler::SpeculateAlone() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!waiting_.empty()) return false;
  }
  // A verification pass is one sequence's; with others running, their batch is worth more.
  ActiveRequest* owner = nullptr;
  Sequence* alone = nullptr;
  for (auto& request : active_) {
    if (request->finished() || request->preempted()) continue;
    if (request->sharing_prefill()) return false;
    live_.clear();
    request->LiveSequences(&live_);
    if (live_.empty()) continue;
    if (owner || live_.size() != 1) return false;
    owner = request.get();
    alone = live_[0];
  }
  if (!alone || !alone->sampling()) return false;
  const size_t drafted = alone->result().draft_tokens;
  const size_t accepted = alone->result().draft_accepted;
  if (!options_.speculator->Step(engine_, *alone)) return false;
  metrics_.AddDraft(alone->result().draft_tokens - drafted,
                    alone->result().draft_accepted - accepted);
  owner->CacheBlocks(*alone);
  return true;
}

bool Scheduler::StepOnce() {
  if (options_.speculator && SpeculateAlone()) return true;
  // When the free blocks cannot take the decodes, or nothing can be fed at all (every prompt
  // waits for blocks), the newest request gives its blocks back; it is recomputed later.
  for (;;) {
    const bool fits = BuildStep();
    if (fits && !inputs_.empty()) break;
    size_t running_requests = 0;
    ActiveSequences(&running_requests);
    if (fits && running_requests == 0) return false;  // nothing to feed
    if (!PreemptNewest()) break;  // alone: the step itself says what does not fit
  }
  if (inputs_.empty()) return false;
  // One sampling sequence's single token alone is the plain step the speculator weighs its
  // drafts against (it chose not to draft, or had no draft): its time goes to the speculator.
  Speculator* timed = options_.speculator && inputs_.size() == 1 && inputs_[0].tokens.size() == 1 &&
                              feeds_[0].sequence && feeds_[0].sequence->sampling()
                          ? options_.speculator
                          : nullptr;
  const double start = timed ? timed->Now() : 0.0;
  // A failure of the whole step is also in every output it touched, so each sequence fails
  // with it on its own.
  const Clock::time_point engine_start = Clock::now();
  const Status stepped = engine_.Step(inputs_, &outputs_);
  const Clock::time_point engine_end = Clock::now();
  if (timed) timed->RecordPlainStep(timed->Now() - start);
  if (!stepped.ok() && options_.engine_lost && options_.engine_lost()) {
    FailEverything(stepped);
    return true;
  }
  for (size_t i = 0; i < feeds_.size(); ++i) {
    if (feeds_[i].sequence) {
      feeds_[i].sequence->Consume(outputs_[i]);
      feeds_[i].request->CacheBlocks(*feeds_[i].sequence);
    } else {
      feeds_[i].request->ConsumeShared(outputs_[i]);
    }
  }
  stepped_ = true;
  step_engine_s_ = std::chrono::duration<double>(engine_end - engine_start).count();
  step_consume_s_ = std::chrono::duration<double>(Clock::now() - engine_end).count();
  return true;
}

void Scheduler::FailEverything(const Status& why) {
  // The operator's one line on why the server stops answering (the clients get it too).
  Log(LogLevel::kError, "%s", why.message().c_str());
  const ApiError error = StatusError(503, "the model cannot run any more (" + why.message() + ")");
  for (auto& request : active_) request->Abort(&error);
  std::lock_guard<std::mutex> lock(mutex_);
  accepting_ = false;
  for (const auto& job : waiting_) {
    job->Push(JobEvent{JobEvent::Kind::kError, 0, "", {}, "", Usage(), error, ""});
  }
  waiting_.clear();
}

void Scheduler::PublishGauges() {
  SchedulerGauges gauges;
  std::vector<SlotInfo> slots;
  for (const auto& request : active_) request->DescribeSlots(&slots);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    gauges.waiting = waiting_.size();
    for (const auto& job : waiting_) {
      SlotInfo slot;
      slot.request_id = job->id();
      slot.state = "waiting";
      slot.n_prompt = job->prompt().size();
      slots.push_back(slot);
    }
  }
  metrics_.SetSlots(std::move(slots));
  // running_sequences_ counts preempted requests too (they keep their --parallel slots); the
  // gauges tell the two apart.
  for (const auto& request : active_) {
    if (request->finished()) continue;
    (request->preempted() ? gauges.preempted_waiting : gauges.running) +=
        request->running_sequences();
  }
  gauges.kv_blocks_free = engine_.kv_free_blocks();
  gauges.kv_blocks_cached = engine_.kv_cached_blocks();
  gauges.preempted = preempted_;
  gauges.kv_blocks_used = engine_.kv_total_blocks() - gauges.kv_blocks_free;
  metrics_.SetGauges(gauges);
}

void Scheduler::Loop() {
  std::vector<std::shared_ptr<Job>> admitted;
  for (;;) {
    bool abort_all = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return !waiting_.empty() || !active_.empty() || !tasks_.empty() || draining_;
      });
      if (draining_ && active_.empty()) break;
      abort_all = draining_ && Clock::now() >= drain_deadline_;
    }
    const Clock::time_point busy_start = Clock::now();
    stepped_ = false;
    RunTasks(true);
    DropCancelled();
    if (abort_all) {
      const ApiError error = StatusError(503, "the server shut down before the reply was complete");
      for (auto& request : active_) request->Abort(&error);
    }
    // Preempted requests come first: a new one is admitted only once none is left waiting.
    if (!ResumePreempted()) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!draining_) TakeAdmissible(&admitted);
    }
    StartAdmitted(&admitted);
    Clock::duration delay{};
    if (StepOnce() && options_.step_delay.count() > 0) {
      const Clock::time_point sleep_start = Clock::now();
      std::this_thread::sleep_for(options_.step_delay);
      delay = Clock::now() - sleep_start;
    }
    // Reporting frees the sequences that finished (or were cancelled) in this step.
    std::erase_if(active_, [](const auto& request) { return request->Report(); });
    running_sequences_ = 0;
    for (const auto& request : active_) running_sequences_ += request->running_sequences();
    PublishGauges();
    if (stepped_) {
      const double busy = std::chrono::duration<double>(Clock::now() - busy_start - delay).count();
      metrics_.AddStepSeconds(step_engine_s_, step_consume_s_,
                              std::max(0.0, busy - step_engine_s_ - step_consume_s_));
    }
  }
  RunTasks(true);  // queued before the shutdown: answered as usual
  PublishGauges();
}

}  // namespace petrel::server
