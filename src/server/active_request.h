// An admitted request inside the scheduler: its engine sequences (one per choice; with n > 1 the
// prompt is prefilled once and forked, so the choices share its KV blocks), the Sequence state
// machine of each choice, and the translation of their tokens into the job's events.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/generation/end_text_filter.h"
#include "core/generation/sequence.h"
#include "core/runtime/engine.h"
#include "server/job.h"
#include "server/metrics.h"

namespace petrel::server {

class ActiveRequest {
 public:
  // KV blocks the request may come to hold at most: every choice at its longest. A request
  // that needs more than the whole cache could never finish, even alone.
  static size_t BlocksNeeded(const Engine& engine, const Job& job);
  // Free KV blocks the request needs to start (or to resume after preemption) and make some
  // progress: its tokens not in the prefix cache, cached blocks no one uses (they stop being
  // free), and one block of growth per choice.
  static size_t BlocksToStart(const Engine& engine, const Job& job);
  size_t BlocksToResume() const;

  // Creates the engine sequences. On error nothing is held.
  static Result<std::unique_ptr<ActiveRequest>> Start(Engine& engine, std::shared_ptr<Job> job,
                                                      Metrics& metrics);
  ActiveRequest(const ActiveRequest&) = delete;
  ActiveRequest& operator=(const ActiveRequest&) = delete;
  ~ActiveRequest();  // frees every engine sequence still held

  Job& job() { return *job_; }
  // Every choice reported, or the request aborted: nothing more to feed.
  bool finished() const { return finished_; }
  // Preempted: holds no KV blocks; its choices keep their tokens until Resume().
  bool preempted() const { return preempted_; }
  // Frees every engine sequence (their full blocks stay in the prefix cache) and returns how
  // many sequences were preempted.
  size_t Preempt();
  // New engine sequences over what the prefix cache still holds of each choice's tokens; the
  // rest is recomputed. False when the request failed (an error event sent).
  bool Resume();
  // Sequences counted against --parallel: n until every choice has finished.
  size_t running_sequences() const;

  // n > 1: the shared prompt still being prefilled in the parent sequence.
  bool sharing_prefill() const { return !finished_ && shared_fed_ < shared_.size(); }
  StepInput NextSharedInput(size_t max_tokens);
  // Takes the outcome of the step that fed NextSharedInput(); once the prompt is in, forks the
  // parent into one sequence per choice. False when the request failed (an error event sent).
  bool ConsumeShared(const StepOutput& output);
  // After a step that fed `sequence`: registers its newly full blocks in the prefix cache.
  void CacheBlocks(const Sequence& sequence);

  // The request's sequences for GET /slots (one per unfinished choice, or the shared prompt).
  void DescribeSlots(std::vector<SlotInfo>* out) const;

  // The choices' state machines that have not finished (empty while sharing the prefill).
  void LiveSequences(std::vector<Sequence*>* out) const;

  // After a step: reports the choices that finished and frees their sequences; true once the
  // whole request is done (its last event sent) or failed.
  bool Report();
  // Ends the request now: frees every sequence; `error` (if any) is sent to the client.
  void Abort(const ApiError* error);

 private:
  using Clock = std::chrono::steady_clock;
  struct Choice {
    size_t index = 0;
    SeqId seq = -1;
    std::unique_ptr<Sequence> sequence;
    std::unique_ptr<EndTextFilter> filter;
    std::vector<GeneratedToken> pending;  // tokens whose logprobs go with the next text
    Clock::time_point last_token;
    bool has_token = false;
    bool reported = false;
  };
  ActiveRequest(Engine& engine, std::shared_ptr<Job> job, Metrics& metrics)
      : engine_(engine), job_(std::move(job)), metrics_(metrics) {}
  GenerateOptions ChoiceOptions(size_t index) const;
  // Creates choice `index`'s Sequence over engine sequence `seq` (owned from here on).
  Status StartChoice(size_t index, SeqId seq, std::vector<int32_t> prompt,
                     std::span<const int32_t> cached);
  Status ForkChoices();  // n > 1: one sequence per choice from the prefilled parent
  bool OnToken(Choice& choice, const GeneratedToken& token, std::string_view piece);
  void FreeSequences();

  Engine& engine_;
  std::shared_ptr<Job> job_;
  Metrics& metrics_;
  bool preempted_ = false;
  SeqId parent_ = -1;            // n > 1: the sequence holding the shared prompt
  std::vector<int32_t> shared_;  // n > 1: the prompt less its last token, prefilled once
  size_t shared_fed_ = 0;
  size_t shared_pending_ = 0;
  std::vector<std::unique_ptr<Choice>> choices_;
  bool first_token_seen_ = false;
  bool finished_ = false;
  Usage usage_;
};

}  // namespace petrel::server
