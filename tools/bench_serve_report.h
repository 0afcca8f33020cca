// What `petrel bench-serve` reports: requests by outcome, throughput, latency percentiles, the
// per-stream checks and, with temperature 0, that a prompt gave the same completion every time.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/bench_serve_client.h"
#include "tools/bench_serve_steps.h"

namespace petrel::tools {

struct Percentiles {
  double p50 = 0.0, p90 = 0.0, p99 = 0.0, mean = 0.0, max = 0.0;
};
// Nearest-rank percentiles of `values` (sorted in place); zeros when it is empty.
Percentiles ComputePercentiles(std::vector<double>* values);

struct BenchSetup {
  std::string url;
  size_t clients = 0;
  double duration_s = 0.0;  // 0: a request count instead
  size_t requests = 0;      // 0: a duration instead
  size_t prompt_tokens = 0;
  size_t shared_prefix_tokens = 0;
  size_t prompt_set = 0;
  size_t max_tokens = 0;
  size_t min_max_tokens = 0;    // max_tokens drawn from [min_max_tokens, max_tokens]; 0: fixed
  double cancel_fraction = 0.0;  // share of requests hung up after a random number of tokens
  double temperature = 0.0;
};

// The finished requests, in the order they ended. Each carries the index of its prompt in the
// prompt set and the prompt's token count as /tokenize gave it.
struct FinishedRequest {
  size_t prompt_index = 0;
  size_t expected_prompt_tokens = 0;
  StreamRecord record;
};

struct BenchReport {
  size_t ok = 0, failed = 0, check_failures = 0;
  size_t cancelled = 0;  // hung up by the client on purpose (--cancel-fraction); not in `ok`
  size_t retried = 0;  // sent a second time after a closed keep-alive connection
  std::map<std::string, size_t> failed_by_status;  // "429", "connection", "error event", ...
  std::vector<std::string> first_problems;         // the first few failures and check failures
  double elapsed_s = 0.0;
  size_t prompt_tokens = 0, cached_tokens = 0, generation_tokens = 0;
  double requests_per_s = 0.0, prompt_tokens_per_s = 0.0, generation_tokens_per_s = 0.0;
  Percentiles ttft_s, inter_token_s, latency_s, tokens_per_request;
  size_t repeated_prompts = 0;  // completions compared with an earlier one of the same prompt
  double server_rss_start_mib = -1.0, server_rss_peak_mib = -1.0;  // -1: not known
  std::optional<ServerStepTimes> server_steps;  // a petrel server's step time during the run

  bool passed() const { return failed == 0 && check_failures == 0 && ok > 0; }
};

// Aggregates `finished`; `greedy` compares completions of the same prompt: the shorter of two
// (fewer max_tokens, or hung up early) must be the start of the longer, and equal when it
// stopped by itself.
BenchReport Summarize(const std::vector<FinishedRequest>& finished, double elapsed_s, bool greedy);

std::string ReportText(const BenchSetup& setup, const BenchReport& report);
nlohmann::json ReportJson(const BenchSetup& setup, const BenchReport& report);

}  // namespace petrel::tools
