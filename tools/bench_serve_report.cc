// Summarize, ReportText and ReportJson.
#include "tools/bench_serve_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace petrel::tools {
namespace {

constexpr size_t kProblemsShown = 5;

std::string Format(const char* format, double a, double b, double c) {
  char line[128];
  std::snprintf(line, sizeof(line), format, a, b, c);
  return line;
}

nlohmann::json PercentilesJson(const Percentiles& p, double scale) {
  return {{"p50", p.p50 * scale},
          {"p90", p.p90 * scale},
          {"p99", p.p99 * scale},
          {"mean", p.mean * scale},
          {"max", p.max * scale}};
}

// The tokens a record holds: what streamed before a hang-up, or usage's count.
size_t Tokens(const StreamRecord& record) {
  return record.cancelled ? record.streamed_tokens : record.completion_tokens;
}

// Two greedy completions of one prompt: empty when they agree, else why not.
std::string CompareGreedy(const StreamRecord& a, const StreamRecord& b) {
  const StreamRecord& shorter = Tokens(a) <= Tokens(b) ? a : b;
  const StreamRecord& longer = &shorter == &a ? b : a;
  const std::string counts = " (" + std::to_string(Tokens(b)) + " vs " +
                             std::to_string(Tokens(a)) + " tokens)";
  if (longer.text.compare(0, shorter.text.size(), shorter.text) != 0) {
    return "greedy completion differs from an earlier one of the same prompt" + counts;
  }
  // One that ended by itself (end of generation) ends every longer one at the same token.
  const bool stopped = !shorter.cancelled && shorter.finish_reason == "stop";
  if ((stopped || Tokens(shorter) == Tokens(longer)) && !longer.cancelled &&
      (longer.text != shorter.text || Tokens(longer) != Tokens(shorter))) {
    return "greedy completion differs in length from an earlier one of the same prompt" + counts;
  }
  return "";
}

}  // namespace

Percentiles ComputePercentiles(std::vector<double>* values) {
  Percentiles out;
  if (values->empty()) return out;
  std::sort(values->begin(), values->end());
  auto rank = [&](double q) {
    const size_t index = size_t(std::ceil(q * double(values->size())));
    return (*values)[std::clamp<size_t>(index, 1, values->size()) - 1];
  };
  out.p50 = rank(0.50);
  out.p90 = rank(0.90);
  out.p99 = rank(0.99);
  out.mean = std::accumulate(values->begin(), values->end(), 0.0) / double(values->size());
  out.max = values->back();
  return out;
}

BenchReport Summarize(const std::vector<FinishedRequest>& finished, double elapsed_s, bool greedy) {
  BenchReport report;
  report.elapsed_s = elapsed_s;
  std::vector<double> ttft, itl, latency, tokens;
  std::map<size_t, const StreamRecord*> first_of_prompt;
  auto problem = [&](const std::string& text) {
    if (report.first_problems.size() < kProblemsShown) report.first_problems.push_back(text);
  };
  for (size_t i = 0; i < finished.size(); ++i) {
    const FinishedRequest& request = finished[i];
    const StreamRecord& record = request.record;
    if (record.retried) ++report.retried;
    const std::string name =
        "request " + std::to_string(i) + " (prompt " + std::to_string(request.prompt_index) + ")";
    if (!record.ok()) {
      ++report.failed;
      const std::string key = record.status == 0     ? "connection"
                              : record.status != 200 ? std::to_string(record.status)
                                                     : "stream error";
      ++report.failed_by_status[key];
      problem(name + ": " + record.error);
      continue;
    }
    if (record.cancelled) {
      ++report.cancelled;
    } else {
      ++report.ok;
    }
    std::string check = record.check_failed;
    if (check.empty() && request.expected_prompt_tokens != 0 && !record.cancelled &&
        record.prompt_tokens != request.expected_prompt_tokens) {
      check = "usage.prompt_tokens " + std::to_string(record.prompt_tokens) + ", /tokenize gave " +
              std::to_string(request.expected_prompt_tokens);
    }
    if (check.empty() && greedy) {
      const auto [it, first] = first_of_prompt.emplace(request.prompt_index, &record);
      if (!first) {
        ++report.repeated_prompts;
        check = CompareGreedy(*it->second, record);
        // The longer one is what later completions of the prompt are held to.
        if (Tokens(record) > Tokens(*it->second)) it->second = &record;
      }
    }
    if (!check.empty()) {
      ++report.check_failures;
      problem(name + ": " + check);
    }
    report.prompt_tokens += record.prompt_tokens;
    report.cached_tokens += record.cached_tokens;
    report.generation_tokens += Tokens(record);
    if (record.token_chunks > 0) ttft.push_back(record.ttft_s);
    itl.insert(itl.end(), record.inter_token_s.begin(), record.inter_token_s.end());
    if (record.cancelled) continue;  // its latency and length are the client's choice
    latency.push_back(record.latency_s);
    tokens.push_back(double(record.completion_tokens));
  }
  if (elapsed_s > 0) {
    report.requests_per_s = double(report.ok) / elapsed_s;
    report.prompt_tokens_per_s = double(report.prompt_tokens) / elapsed_s;
    report.generation_tokens_per_s = double(report.generation_tokens) / elapsed_s;
  }
  report.ttft_s = ComputePercentiles(&ttft);
  report.inter_token_s = ComputePercentiles(&itl);
  report.latency_s = ComputePercentiles(&latency);
  report.tokens_per_request = ComputePercentiles(&tokens);
  return report;
}

std::string ReportText(const BenchSetup& setup, const BenchReport& report) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line),
                "bench-serve: %zu clients, ~%zu prompt tokens (%zu shared), %zu prompts, "
                "max_tokens %zu, temperature %g, %s\n",
                setup.clients, setup.prompt_tokens, setup.shared_prefix_tokens, setup.prompt_set,
                setup.max_tokens, setup.temperature, setup.url.c_str());
  out += line;
  std::string failures;
  for (const auto& [status, count] : report.failed_by_status) {
    failures += (failures.empty() ? " (" : ", ") + status + ": " + std::to_string(count);
  }
  if (!failures.empty()) failures += ")";
  std::snprintf(line, sizeof(line),
                "requests: %zu ok, %zu failed%s, %zu failed checks in %.1f s: %.2f requests/s%s\n",
                report.ok, report.failed, failures.c_str(), report.check_failures, report.elapsed_s,
                report.requests_per_s,
                report.retried == 0 ? ""
                                    : (" (" + std::to_string(report.retried) +
                                       " sent again after a closed keep-alive connection)")
                                          .c_str());
  out += line;
  if (report.cancelled > 0) {
    std::snprintf(line, sizeof(line), "requests hung up by their client: %zu\n",
                  report.cancelled);
    out += line;
  }
  std::snprintf(line, sizeof(line),
                "tokens: generation %.1f t/s (%zu), prompt %.1f t/s (%zu, %zu from the prefix "
                "cache)\n",
                report.generation_tokens_per_s, report.generation_tokens,
                report.prompt_tokens_per_s, report.prompt_tokens, report.cached_tokens);
  out += line;
  out += Format("TTFT ms: p50 %.1f, p90 %.1f, p99 %.1f\n", report.ttft_s.p50 * 1e3,
                report.ttft_s.p90 * 1e3, report.ttft_s.p99 * 1e3);
  out += Format("inter-token ms: p50 %.1f, p90 %.1f, p99 %.1f\n", report.inter_token_s.p50 * 1e3,
                report.inter_token_s.p90 * 1e3, report.inter_token_s.p99 * 1e3);
  out += Format("tokens per request: p50 %.0f, p90 %.0f, p99 %.0f\n", report.tokens_per_request.p50,
                report.tokens_per_request.p90, report.tokens_per_request.p99);
  std::snprintf(line, sizeof(line),
                "checks: every stream's token chunks = usage.completion_tokens, no gap or "
                "repeat; %zu repeated greedy prompts compared\n",
                report.repeated_prompts);
  out += line;
  if (report.server_rss_peak_mib >= 0) {
    std::snprintf(line, sizeof(line), "server RSS: %.0f MiB when ready, %.0f MiB peak\n",
                  report.server_rss_start_mib, report.server_rss_peak_mib);
    out += line;
  }
  if (report.server_steps) {
    const ServerStepTimes& steps = *report.server_steps;
    std::snprintf(line, sizeof(line),
                  "server steps: %.0f, %.2f s engine, %.2f s consuming outputs, %.2f s "
                  "scheduling, in %.2f s of run\n",
                  steps.steps, steps.engine_s, steps.consume_s, steps.scheduling_s,
                  report.elapsed_s);
    out += line;
  }
  for (const std::string& problem : report.first_problems) out += "  " + problem + "\n";
  out += report.passed() ? "PASS\n" : "FAIL\n";
  return out;
}

nlohmann::json ReportJson(const BenchSetup& setup, const BenchReport& report) {
  nlohmann::json failed = nlohmann::json::object();
  for (const auto& [status, count] : report.failed_by_status) failed[status] = count;
  nlohmann::json out = {
      {"url", setup.url},
      {"clients", setup.clients},
      {"duration_s", setup.duration_s},
      {"requests_limit", setup.requests},
      {"prompt_tokens_target", setup.prompt_tokens},
      {"shared_prefix_tokens", setup.shared_prefix_tokens},
      {"prompt_set", setup.prompt_set},
      {"max_tokens", setup.max_tokens},
      {"temperature", setup.temperature},
      {"requests_ok", report.ok},
      {"requests_failed", report.failed},
      {"requests_cancelled", report.cancelled},
      {"min_max_tokens", setup.min_max_tokens},
      {"cancel_fraction", setup.cancel_fraction},
      {"failed_by_status", failed},
      {"check_failures", report.check_failures},
      {"requests_retried", report.retried},
      {"problems", report.first_problems},
      {"elapsed_s", report.elapsed_s},
      {"requests_per_s", report.requests_per_s},
      {"prompt_tokens", report.prompt_tokens},
      {"cached_prompt_tokens", report.cached_tokens},
      {"generation_tokens", report.generation_tokens},
      {"prompt_tokens_per_s", report.prompt_tokens_per_s},
      {"generation_tokens_per_s", report.generation_tokens_per_s},
      {"ttft_ms", PercentilesJson(report.ttft_s, 1e3)},
      {"inter_token_ms", PercentilesJson(report.inter_token_s, 1e3)},
      {"latency_ms", PercentilesJson(report.latency_s, 1e3)},
      {"tokens_per_request", PercentilesJson(report.tokens_per_request, 1.0)},
      {"repeated_prompts_compared", report.repeated_prompts},
      {"server_rss_start_mib",
       report.server_rss_start_mib >= 0 ? nlohmann::json(report.server_rss_start_mib) : nullptr},
      {"server_rss_peak_mib",
       report.server_rss_peak_mib >= 0 ? nlohmann::json(report.server_rss_peak_mib) : nullptr},
      {"passed", report.passed()}};
  if (report.server_steps) {
    out["server_steps"] = {{"steps", report.server_steps->steps},
                           {"engine_s", report.server_steps->engine_s},
                           {"consume_s", report.server_steps->consume_s},
                           {"scheduling_s", report.server_steps->scheduling_s}};
  }
  return out;
}

}  // namespace petrel::tools
