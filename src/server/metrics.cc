// Metrics: Prometheus text exposition format 0.0.4.
#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace petrel::server {
namespace {

std::string Number(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

void Header(const char* name, const char* type, const char* help, std::string* out) {
  *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void Line(const std::string& name, double value, std::string* out) {
  *out += name + " " + Number(value) + "\n";
}

// Tokens per request: powers of four up to a long context.
std::vector<double> TokenBounds() { return {0, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144}; }

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const size_t bucket =
      size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::Render(const std::string& name, std::string* out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    Line(name + "_bucket{le=\"" + Number(bounds_[i]) + "\"}", double(cumulative), out);
  }
  Line(name + "_bucket{le=\"+Inf\"}", double(count_), out);
  Line(name + "_sum", sum_, out);
  Line(name + "_count", double(count_), out);
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      queue_({0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}),
      request_prompt_(TokenBounds()),
      request_cached_(TokenBounds()),
      request_generated_(TokenBounds()) {}

void Metrics::ObserveQueueTime(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.Observe(seconds);
}

void Metrics::ObserveRequestTokens(size_t prompt, size_t cached, size_t generated) {
  std::lock_guard<std::mutex> lock(mutex_);
  request_prompt_.Observe(double(prompt));
  request_cached_.Observe(double(cached));
  request_generated_.Observe(double(generated));
}

void Metrics::SetSlots(std::vector<SlotInfo> slots) {
  std::lock_guard<std::mutex> lock(mutex_);
  slots_ = std::move(slots);
}

std::vector<SlotInfo> Metrics::slots() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return slots_;
}

void Metrics::CountRequest(int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_by_status_[status];
}

void Metrics::AddPrefixCacheHit(size_t blocks, size_t tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  prefix_hit_blocks_ += blocks;
  prefix_hit_tokens_ += tokens;
}

void Metrics::AddPromptTokens(size_t tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += tokens;
}

void Metrics::AddGenerationTokens(size_t tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  generation_tokens_ += tokens;
}

void Metrics::AddDraft(size_t drafted, size_t accepted) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++speculative_passes_;
  draft_tokens_ += drafted;
  draft_accepted_ += accepted;
}

void Metrics::AddStepSeconds(double engine, double consume, double scheduling) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++steps_;
  step_engine_s_ += engine;
  step_consume_s_ += consume;
  step_scheduling_s_ += scheduling;
}

void Metrics::ObserveTimeToFirstToken(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.Observe(seconds);
}

void Metrics::ObserveInterTokenLatency(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  itl_.Observe(seconds);
}

void Metrics::SetGauges(const SchedulerGauges& gauges) {
  std::lock_guard<std::mutex> lock(mutex_);
  gauges_ = gauges;
}

SchedulerGauges Metrics::gauges() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return gauges_;
}

std::string Metrics::Render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  Header("petrel_requests_total", "counter", "HTTP requests answered, by status code.", &out);
  for (const auto& [status, count] : requests_by_status_) {
    Line("petrel_requests_total{status=\"" + std::to_string(status) + "\"}", double(count), &out);
  }
  Header("petrel_queue_depth", "gauge", "Requests waiting to be admitted.", &out);
  Line("petrel_queue_depth", double(gauges_.waiting), &out);
  Header("petrel_running_sequences", "gauge",
         "Sequences being prefilled or decoded (preempted ones not included).", &out);
  Line("petrel_running_sequences", double(gauges_.running), &out);
  Header("petrel_preempted_sequences", "gauge", "Sequences preempted and waiting to be resumed.",
         &out);
  Line("petrel_preempted_sequences", double(gauges_.preempted_waiting), &out);
  Header("petrel_kv_blocks_used", "gauge", "KV cache blocks holding tokens.", &out);
  Line("petrel_kv_blocks_used", double(gauges_.kv_blocks_used), &out);
  Header("petrel_kv_blocks_free", "gauge", "KV cache blocks free.", &out);
  Line("petrel_kv_blocks_free", double(gauges_.kv_blocks_free), &out);
  Header("petrel_kv_blocks_cached", "gauge",
         "Free KV cache blocks still holding a cached prefix (evicted least recently used first).",
         &out);
  Line("petrel_kv_blocks_cached", double(gauges_.kv_blocks_cached), &out);
  Header("petrel_prefix_cache_hit_blocks_total", "counter",
         "KV cache blocks reused from the prefix cache instead of computed.", &out);
  Line("petrel_prefix_cache_hit_blocks_total", double(prefix_hit_blocks_), &out);
  Header("petrel_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens whose K/V came from the prefix cache.", &out);
  Line("petrel_prefix_cache_hit_tokens_total", double(prefix_hit_tokens_), &out);
  Header("petrel_preempted_sequences_total", "counter",
         "Sequences preempted when the KV cache ran out of blocks (recomputed later).", &out);
  Line("petrel_preempted_sequences_total", double(gauges_.preempted), &out);
  Header("petrel_prompt_tokens_total", "counter", "Prompt tokens admitted.", &out);
  Line("petrel_prompt_tokens_total", double(prompt_tokens_), &out);
  Header("petrel_generation_tokens_total", "counter", "Tokens generated.", &out);
  Line("petrel_generation_tokens_total", double(generation_tokens_), &out);
  Header("petrel_speculative_passes_total", "counter",
         "Forward passes that verified a draft (--draft, --lookup-ngram).", &out);
  Line("petrel_speculative_passes_total", double(speculative_passes_), &out);
  Header("petrel_draft_tokens_total", "counter", "Drafted tokens verified.", &out);
  Line("petrel_draft_tokens_total", double(draft_tokens_), &out);
  Header("petrel_draft_accepted_tokens_total", "counter",
         "Drafted tokens the model accepted (acceptance rate: over petrel_draft_tokens_total).",
         &out);
  Line("petrel_draft_accepted_tokens_total", double(draft_accepted_), &out);
  Header("petrel_steps_total", "counter", "Scheduler steps that ran a forward pass.", &out);
  Line("petrel_steps_total", double(steps_), &out);
  Header("petrel_step_seconds_total", "counter",
         "Time in scheduler steps, by part: engine (the forward pass), consume (sampling, "
         "detokenizing and streaming its outputs), scheduling (admission, building the step, "
         "reporting).",
         &out);
  Line("petrel_step_seconds_total{part=\"engine\"}", step_engine_s_, &out);
  Line("petrel_step_seconds_total{part=\"consume\"}", step_consume_s_, &out);
  Line("petrel_step_seconds_total{part=\"scheduling\"}", step_scheduling_s_, &out);
  Header("petrel_time_to_first_token_seconds", "histogram",
         "From arrival to the first generated token of a request.", &out);
  ttft_.Render("petrel_time_to_first_token_seconds", &out);
  Header("petrel_inter_token_latency_seconds", "histogram",
         "Between consecutive tokens of one sequence.", &out);
  itl_.Render("petrel_inter_token_latency_seconds", &out);
  Header("petrel_request_queue_seconds", "histogram",
         "From a request's arrival to its admission (waiting for a free sequence or KV blocks).",
         &out);
  queue_.Render("petrel_request_queue_seconds", &out);
  Header("petrel_request_prompt_tokens", "histogram", "Prompt tokens of each finished request.",
         &out);
  request_prompt_.Render("petrel_request_prompt_tokens", &out);
  Header("petrel_request_cached_tokens", "histogram",
         "Prompt tokens of each finished request whose K/V came from the prefix cache.", &out);
  request_cached_.Render("petrel_request_cached_tokens", &out);
  Header("petrel_request_generated_tokens", "histogram",
         "Tokens generated for each finished request (all its choices).", &out);
  request_generated_.Render("petrel_request_generated_tokens", &out);
  return out;
}

}  // namespace petrel::server
