// The scheduler: one thread that owns the engine and runs continuous batching over
// Engine::Step. Each step it drops cancelled requests, admits waiting ones while --parallel and
// the KV blocks allow, feeds every decoding sequence its last token and fills the rest of the
// step's token budget with prompt chunks, then reports what each sequence produced.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/generation/speculative.h"
#include "core/runtime/engine.h"
#include "server/active_request.h"
#include "server/job.h"
#include "server/json_fields.h"  // ApiResult
#include "server/metrics.h"

namespace petrel::server {

struct SchedulerOptions {
  size_t parallel = 4;        // sequences running at once at most (--parallel)
  size_t max_waiting = 64;    // queued requests at most; more are refused with 429
  size_t batch_tokens = 512;  // tokens per step at most (--batch-tokens, at most the engine's)
  // --draft / --lookup-ngram: a sequence that runs alone (nothing else decoding, prefilling or
  // waiting) verifies drafts in its steps. Not owned; null: plain decoding only.
  Speculator* speculator = nullptr;
  // A pause after every step, for tests that need a request to stay running (a full queue)
  // however fast the machine is (PETREL_SERVE_TEST_STEP_DELAY_MS); zero otherwise.
  std::chrono::milliseconds step_delay{0};
  // Asked after a step fails as a whole: true when the engine cannot run another step (a
  // pipeline rank is gone, docs/DISTRIBUTED.md). Then every running and waiting request gets
  // 503 and no more are accepted. Null: a failed step fails only its own sequences.
  std::function<bool()> engine_lost;
};

class Scheduler {
 public:
  // `engine` and `metrics` must outlive the scheduler; from Start() on only its thread touches
  // the engine's sequences.
  Scheduler(Engine& engine, const SchedulerOptions& options, Metrics& metrics);
  ~Scheduler();  // Shutdown(0) if still running

  void Start();
  // Queues `job`: 429 when the queue is full, 503 once shutting down, 413 when it could never
  // fit the KV cache.
  ApiResult Submit(std::shared_ptr<Job> job);
  // Runs `task` on the scheduler thread between two steps (the thread owns the engine) and
  // waits for it: embeddings, which borrow sequences of their own and free them. False, with
  // `task` not run, once the server is shutting down.
  bool RunBetweenSteps(std::function<void(Engine&)> task);
  // Stops admitting: waiting requests get 503, running ones may finish within `grace`, after
  // which they are cancelled (their streams end with an error). Returns once the thread ended.
  void Shutdown(std::chrono::milliseconds grace);

  const SchedulerOptions& options() const { return options_; }

 private:
  using Clock = std::chrono::steady_clock;
  void Loop();
  // Moves the waiting requests that fit to `admitted`; under mutex_.
  void TakeAdmissible(std::vector<std::shared_ptr<Job>>* admitted);
  // Resumes preempted requests, oldest first, while their blocks are free; true when one is
  // still waiting (then no new request is admitted before it).
  bool ResumePreempted();
  // Fills inputs_ and feeds_: decodes first, then prompt chunks within the budget and the free
  // KV blocks. False when the decodes alone need more blocks than are free.
  bool BuildStep();
  // Preempts the most recently admitted running request unless it is the only one.
  bool PreemptNewest();
  // The most tokens of a chunk for `seq` whose blocks fit in `free_blocks`.
  size_t ChunkThatFits(SeqId seq, size_t tokens, size_t free_blocks) const;
  // Sequences of requests that are neither finished nor preempted.
  size_t ActiveSequences(size_t* requests) const;
  void StartAdmitted(std::vector<std::shared_ptr<Job>>* admitted);
  void DropCancelled();
  // One Engine::Step over every running request; false when there was nothing to feed.
  bool StepOnce();
  // With a speculator, when one sequence runs alone: one speculative step for it (true), or
  // false when it is not alone or has no draft this step.
  bool SpeculateAlone();
  void PublishGauges();
  // The engine is gone (SchedulerOptions::engine_lost): every request gets 503 with `why`.
  void FailEverything(const Status& why);
  // Runs the queued tasks (or, with `run` false, answers them as not run).
  void RunTasks(bool run);

  Engine& engine_;
  const SchedulerOptions options_;
  Metrics& metrics_;
  std::thread thread_;
  // Shared with Submit and Shutdown.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> waiting_;
  struct Task {
    std::function<void(Engine&)> run;
    std::promise<bool> done;  // true: it ran
  };
  std::deque<Task> tasks_;
  bool accepting_ = true;
  bool draining_ = false;
  Clock::time_point drain_deadline_;
  // The scheduler thread's own.
  std::vector<std::unique_ptr<ActiveRequest>> active_;  // in admission order
  size_t running_sequences_ = 0;  // as of the last admission (read under mutex_)
  uint64_t preempted_ = 0;        // sequences preempted so far
  // The last plain step's engine and consume seconds (Metrics::AddStepSeconds); `stepped_`
  // when StepOnce ran one.
  bool stepped_ = false;
  double step_engine_s_ = 0.0, step_consume_s_ = 0.0;
  // Step scratch.
  struct Feed {
    ActiveRequest* request = nullptr;
    Sequence* sequence = nullptr;  // null: the request's shared prompt
  };
  std::vector<StepInput> inputs_;
  std::vector<Feed> feeds_;
  std::vector<StepOutput> outputs_;
  std::vector<Sequence*> live_;
};

}  // namespace petrel::server
