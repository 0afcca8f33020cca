// The server's counters, gauges and latency histograms, rendered as Prometheus text for
// GET /metrics. Written by the scheduler and the connection threads, read by /metrics.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace petrel::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // `name`_bucket{le=...}, _sum and _count lines.
  void Render(const std::string& name, std::string* out) const;

 private:
  std::vector<double> bounds_;    // upper bounds, ascending; +Inf is implied
  std::vector<uint64_t> counts_;  // (bounds + 1), not cumulative
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// The scheduler's state after its last step.
struct SchedulerGauges {
  size_t waiting = 0;  // requests queued, not yet admitted
  size_t running = 0;  // sequences being prefilled or decoded, preempted ones not
  size_t preempted_waiting = 0;  // sequences preempted, waiting to be resumed
  size_t kv_blocks_used = 0;
  size_t kv_blocks_free = 0;    // cached blocks included: they are evicted on demand
  size_t kv_blocks_cached = 0;  // free blocks that still hold a cached prefix
  uint64_t preempted = 0;       // sequences preempted so far (counter)
};

// One engine sequence (or a request still queued) as GET /slots shows it.
struct SlotInfo {
  int64_t id = -1;          // the engine sequence; -1 while queued or preempted
  uint64_t request_id = 0;  // Job::id()
  size_t choice = 0;        // the choice (n > 1) the sequence computes
  const char* state = "";   // "waiting", "prefill", "decode", "preempted"
  size_t position = 0;      // tokens in the sequence's KV cache
  size_t n_prompt = 0;      // the request's prompt tokens
  size_t n_generated = 0;   // tokens the choice has generated
  size_t n_cached = 0;      // prompt tokens whose K/V came from the prefix cache
};

class Metrics {
 public:
  Metrics();
  void CountRequest(int status);  // one finished HTTP request with this status
  void AddPromptTokens(size_t tokens);
  void AddGenerationTokens(size_t tokens);
  // One speculative verification pass: `drafted` tokens verified, `accepted` of them kept.
  void AddDraft(size_t drafted, size_t accepted);
  // One scheduler step's time by part: the engine's forward pass, consuming its outputs
  // (sampling, detokenizing, streaming), and the rest of the step (admission, building the
  // step's inputs, reporting): where a busy server's time goes.
  void AddStepSeconds(double engine, double consume, double scheduling);
  // A sequence started over `blocks` cached blocks holding `tokens` prompt tokens.
  void AddPrefixCacheHit(size_t blocks, size_t tokens);
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  // From a request's arrival to its admission (its first sequence created).
  void ObserveQueueTime(double seconds);
  // A finished request's token counts (all choices' generated tokens together).
  void ObserveRequestTokens(size_t prompt, size_t cached, size_t generated);
  void SetSlots(std::vector<SlotInfo> slots);
  std::vector<SlotInfo> slots() const;
  void SetGauges(const SchedulerGauges& gauges);
  SchedulerGauges gauges() const;
  std::string Render() const;

 private:
  mutable std::mutex mutex_;
  std::map<int, uint64_t> requests_by_status_;
  uint64_t prompt_tokens_ = 0;
  uint64_t generation_tokens_ = 0;
  uint64_t speculative_passes_ = 0, draft_tokens_ = 0, draft_accepted_ = 0;
  uint64_t prefix_hit_blocks_ = 0, prefix_hit_tokens_ = 0;
  uint64_t steps_ = 0;
  double step_engine_s_ = 0.0, step_consume_s_ = 0.0, step_scheduling_s_ = 0.0;
  Histogram ttft_, itl_, queue_;
  Histogram request_prompt_, request_cached_, request_generated_;
  SchedulerGauges gauges_;
  std::vector<SlotInfo> slots_;
};

}  // namespace petrel::server
