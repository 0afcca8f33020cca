// Scheduler: admission by --parallel and reserved KV blocks, decodes before prompt chunks in each
// step's token budget, cancellation at the top of every step.
#include "server/scheduler.h"

#include <algorithm>

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
                         StatusError(503, "the server is shutting down")});
    }
    waiting_.clear();
    if (!draining_) {
      draining_ = true;
      drain_deadline_ = Clock::now() + grace;
    }
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::TakeAdmissible(std::vector<std::shared_ptr<Job>>* admitted) {
  size_t running = running_sequences_;
  size_t reserved = reserved_blocks_;
  while (!waiting_.empty()) {
    const std::shared_ptr<Job>& job = waiting_.front();
    if (job->cancelled()) {
      waiting_.pop_front();
      continue;
    }
    // First come, first served: a request that does not fit yet holds back those behind it,
    // so a long one is never starved by a stream of short ones.
    const size_t blocks = ActiveRequest::BlocksNeeded(engine_, *job);
    if (running + job->request().n > options_.parallel ||
        reserved + blocks > engine_.kv_total_blocks()) {
      break;
    }
    running += job->request().n;
    reserved += blocks;
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
                         StatusError(400, request.status().message())});
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

bool Scheduler::StepOnce() {
  inputs_.clear();
  feeds_.clear();
  size_t budget = options_.batch_tokens;
  // Decoding sequences first, one token each, so that their pace does not depend on the
  // prompts arriving; prompt chunks take what is left, oldest request first.
  for (auto& request : active_) {
    if (request->finished()) continue;  // aborted in this iteration
    live_.clear();
    request->LiveSequences(&live_);
    for (Sequence* sequence : live_) {
      if (budget == 0 || sequence->prefilling()) continue;
      inputs_.push_back(sequence->NextInput(1));
      feeds_.push_back(Feed{request.get(), sequence});
      budget -= 1;
    }
  }
  for (auto& request : active_) {
    if (budget == 0) break;
    if (request->finished()) continue;
    if (request->sharing_prefill()) {
      inputs_.push_back(request->NextSharedInput(budget));
      feeds_.push_back(Feed{request.get(), nullptr});
      budget -= inputs_.back().tokens.size();
      continue;
    }
    live_.clear();
    request->LiveSequences(&live_);
    for (Sequence* sequence : live_) {
      if (budget == 0 || !sequence->prefilling()) continue;
      inputs_.push_back(sequence->NextInput(budget));
      feeds_.push_back(Feed{request.get(), sequence});
      budget -= inputs_.back().tokens.size();
    }
  }
  if (inputs_.empty()) return false;
  // A failure of the whole step is also in every output it touched, so each sequence fails
  // with it on its own.
  (void)engine_.Step(inputs_, &outputs_);
  for (size_t i = 0; i < feeds_.size(); ++i) {
    if (feeds_[i].sequence) {
      feeds_[i].sequence->Consume(outputs_[i]);
      feeds_[i].request->CacheBlocks(*feeds_[i].sequence);
    } else {
      feeds_[i].request->ConsumeShared(outputs_[i]);
    }
  }
  return true;
}

void Scheduler::PublishGauges() {
  SchedulerGauges gauges;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    gauges.waiting = waiting_.size();
  }
  gauges.running = running_sequences_;
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
      wake_.wait(lock, [&] { return !waiting_.empty() || !active_.empty() || draining_; });
      if (draining_ && active_.empty()) break;
      abort_all = draining_ && Clock::now() >= drain_deadline_;
      if (!draining_) TakeAdmissible(&admitted);
    }
    DropCancelled();
    if (abort_all) {
      const ApiError error = StatusError(503, "the server shut down before the reply was complete");
      for (auto& request : active_) request->Abort(&error);
    }
    StartAdmitted(&admitted);
    StepOnce();
    // Reporting frees the sequences that finished (or were cancelled) in this step.
    std::erase_if(active_, [](const auto& request) { return request->Report(); });
    running_sequences_ = 0;
    reserved_blocks_ = 0;
    for (const auto& request : active_) {
      running_sequences_ += request->running_sequences();
      reserved_blocks_ += request->reserved_blocks();
    }
    PublishGauges();
  }
  PublishGauges();
}

}  // namespace petrel::server
