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

class Metrics {
 public:
  Metrics();
  void CountRequest(int status);  // one finished HTTP request with this status
  void AddPromptTokens(size_t tokens);
  void AddGenerationTokens(size_t tokens);
  // One speculative verification pass: `drafted` tokens verified, `accepted` of them kept.
  void AddDraft(size_t drafted, size_t accepted);
  // A sequence started over `blocks` cached blocks holding `tokens` prompt tokens.
  void AddPrefixCacheHit(size_t blocks, size_t tokens);
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
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
  Histogram ttft_, itl_;
  SchedulerGauges gauges_;
};

}  // namespace petrel::server
