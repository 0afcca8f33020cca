// One admitted HTTP request as the scheduler sees it, and the channel of events (text deltas,
// choice ends, the end, an error) that the scheduler thread sends to the connection thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "core/generation/sequence.h"  // GeneratedToken
#include "server/api_error.h"
#include "server/completion_request.h"

namespace petrel::server {

struct Usage {
  size_t prompt_tokens = 0;
  size_t completion_tokens = 0;  // over all choices
  size_t cached_tokens = 0;      // prompt tokens whose K/V came from the prefix cache
};

struct JobEvent {
  enum class Kind { kDelta, kChoiceEnd, kDone, kError };
  Kind kind = Kind::kDelta;
  size_t choice = 0;
  std::string text;                    // kDelta: text now final
  std::vector<GeneratedToken> tokens;  // kDelta: the sampled tokens it reports (logprobs)
  std::string finish_reason;           // kChoiceEnd: "stop" or "length"
  Usage usage;                         // kDone
  ApiError error;                      // kError: the request failed; nothing follows
  std::string stop_sequence;           // kChoiceEnd: the stop string that ended it ("" for none)
};

class Job {
 public:
  using Clock = std::chrono::steady_clock;
  Job(CompletionRequest request, std::vector<int32_t> prompt)
      : request_(std::move(request)),
        prompt_(std::move(prompt)),
        arrival_(Clock::now()),
        id_(NextId()) {}

  // The request's number, counted from 1 since the server started (GET /slots shows it).
  uint64_t id() const { return id_; }
  const CompletionRequest& request() const { return request_; }
  const std::vector<int32_t>& prompt() const { return prompt_; }
  Clock::time_point arrival() const { return arrival_; }

  // Scheduler side.
  void Push(JobEvent event);
  // Connection side: waits until events arrive or `timeout` passes, then moves them to `out`
  // (cleared first). False when none came.
  bool Wait(std::chrono::milliseconds timeout, std::vector<JobEvent>* out);

  // The client went away (or the server is stopping): the scheduler frees the request's
  // sequences at its next step and sends nothing more.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  const CompletionRequest request_;
  const std::vector<int32_t> prompt_;
  const Clock::time_point arrival_;
  const uint64_t id_;
  static uint64_t NextId();
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<JobEvent> events_;
};

}  // namespace petrel::server
