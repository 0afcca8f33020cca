// `petrel bench-serve`: N concurrent streaming clients against `petrel serve` over HTTP (a
// running one at --url, or one started here from -m MODEL), each looping over a prompt set; it
// reports throughput and latency percentiles, checks every stream (tokens counted as they arrive
// against usage, no lost or repeated chunk, greedy completions of a prompt identical), and exits
// non-zero when a request failed or a check did.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "tools/bench_serve_client.h"
#include "tools/bench_serve_prompts.h"
#include "tools/bench_serve_report.h"
#include "tools/common.h"
#include "tools/serve_child.h"

namespace petrel::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchServeArgs {
  std::string url;
  std::string model;
  int64_t threads = 0;
  int64_t parallel = 0;  // 0: --clients
  std::vector<std::string> serve_args;
  int64_t ready_timeout = 600;
  std::string api_key;
  int64_t clients = 8;
  double duration = 0.0;
  int64_t requests = 0;
  int64_t prompt_tokens = 100;
  int64_t shared_prefix = 0;
  int64_t prompt_set = 256;
  int64_t max_tokens = 64;
  int64_t min_max_tokens = 0;  // 0: every request asks for max_tokens
  double cancel_fraction = 0.0;
  double temperature = 0.0;
  int64_t logprobs = 0;
  int64_t seed = 1;
  std::string
      shared_prefix_attention;  // -m: the server's --shared-prefix-attn (empty: its default)
  bool json = false;
};

// Every client runs requests until the duration is over or the request count is reached; the
// requests in flight at the end of the duration finish and count.
std::vector<FinishedRequest> RunClients(const BenchServeArgs& args, const std::string& url,
                                        const std::vector<BenchPrompt>& prompts,
                                        Clock::time_point* start, Clock::time_point* end) {
  std::vector<FinishedRequest> finished;
  std::mutex mutex;
  std::atomic<size_t> next{0};
  *start = Clock::now();
  const Clock::time_point deadline =
      *start + std::chrono::duration_cast<Clock::duration>(
                   std::chrono::duration<double>(args.duration > 0 ? args.duration : 1e9));
  std::vector<std::thread> clients;
  for (int64_t c = 0; c < args.clients; ++c) {
    clients.emplace_back([&] {
      BenchClient client(url, args.api_key);
      for (;;) {
        if (args.duration > 0 && Clock::now() >= deadline) break;
        const size_t number = next.fetch_add(1);
        if (args.requests > 0 && number >= size_t(args.requests)) break;
        const size_t index = number % prompts.size();
        BenchRequest request;
        request.prompt = prompts[index].text;
        // Drawn from the request's number, so that a run is the same for a --seed.
        std::mt19937_64 random(uint64_t(args.seed) * 0x9E3779B97F4A7C15ull + number);
        request.max_tokens = size_t(args.max_tokens);
        if (args.min_max_tokens > 0) {
          request.max_tokens = std::uniform_int_distribution<size_t>(
              size_t(args.min_max_tokens), size_t(args.max_tokens))(random);
        }
        if (args.cancel_fraction > 0 &&
            std::uniform_real_distribution<double>(0.0, 1.0)(random) < args.cancel_fraction) {
          request.cancel_after_tokens =
              std::uniform_int_distribution<size_t>(1, request.max_tokens)(random);
        }
        request.temperature = args.temperature;
        request.logprobs = args.logprobs;
        if (args.temperature > 0) request.seed = args.seed + int64_t(number);
        FinishedRequest done{index, prompts[index].tokens, client.Complete(request)};
        std::lock_guard<std::mutex> lock(mutex);
        finished.push_back(std::move(done));
      }
    });
  }
  for (std::thread& client : clients) client.join();
  *end = *start;
  for (const FinishedRequest& request : finished) *end = std::max(*end, request.record.end);
  std::sort(finished.begin(), finished.end(),
            [](const auto& a, const auto& b) { return a.record.end < b.record.end; });
  return finished;
}

int Run(BenchServeArgs& args) {
  if (args.duration <= 0 && args.requests <= 0) args.duration = 60;
  if (args.min_max_tokens > args.max_tokens) {
    return Fail(Error("--min-max-tokens %lld must not pass --max-tokens %lld",
                      (long long)args.min_max_tokens, (long long)args.max_tokens));
  }
  if (args.shared_prefix >= args.prompt_tokens) {
    return Fail(Error("--shared-prefix %lld must be below --prompt-tokens %lld",
                      (long long)args.shared_prefix, (long long)args.prompt_tokens));
  }
  ServeChild child;
  std::string url = args.url;
  if (!args.model.empty()) {
    std::vector<std::string> serve = {
        "-m", args.model, "--no-access-log", "--parallel",
        std::to_string(args.parallel > 0 ? args.parallel : args.clients)};
    if (args.threads > 0) serve.insert(serve.end(), {"-t", std::to_string(args.threads)});
    if (!args.shared_prefix_attention.empty()) {
      serve.insert(serve.end(), {"--shared-prefix-attn", args.shared_prefix_attention});
    }
    serve.insert(serve.end(), args.serve_args.begin(), args.serve_args.end());
    if (!args.json)
      std::fprintf(stderr, "bench-serve: starting petrel serve -m %s\n", args.model.c_str());
    if (Status status = child.Start(serve, std::chrono::seconds(args.ready_timeout));
        !status.ok()) {
      return Fail(status);
    }
    url = child.url();
  }
  PromptSetOptions prompt_options;
  prompt_options.count = size_t(args.prompt_set);
  prompt_options.tokens = size_t(args.prompt_tokens);
  prompt_options.shared_prefix_tokens = size_t(args.shared_prefix);
  prompt_options.seed = uint64_t(args.seed);
  auto prompts = BuildPromptSet(url, args.api_key, prompt_options);
  if (!prompts.ok()) return Fail(prompts.status());
  const double rss_start = child.RssMib();
  const std::optional<ServerStepTimes> steps_before = ReadServerStepTimes(url, args.api_key);

  Clock::time_point start, end;
  const std::vector<FinishedRequest> finished = RunClients(args, url, *prompts, &start, &end);
  BenchReport report = Summarize(finished, std::chrono::duration<double>(end - start).count(),
                                 args.temperature == 0.0);
  if (const std::optional<ServerStepTimes> steps_after = ReadServerStepTimes(url, args.api_key);
      steps_before && steps_after) {
    report.server_steps = StepTimesBetween(*steps_before, *steps_after);
  }
  if (!args.model.empty()) {
    report.server_rss_start_mib = rss_start;
    report.server_rss_peak_mib = child.PeakRssMib();
    const int exit_status = child.Stop(std::chrono::seconds(60));
    if (exit_status != 0) {
      ++report.check_failures;
      report.first_problems.push_back("petrel serve exited with status " +
                                      std::to_string(exit_status) + " after SIGTERM");
    }
  }
  BenchSetup setup;
  setup.url = url;
  setup.clients = size_t(args.clients);
  setup.duration_s = args.duration;
  setup.requests = size_t(args.requests);
  setup.prompt_tokens = size_t(args.prompt_tokens);
  setup.shared_prefix_tokens = size_t(args.shared_prefix);
  setup.prompt_set = size_t(args.prompt_set);
  setup.max_tokens = size_t(args.max_tokens);
  setup.min_max_tokens = size_t(args.min_max_tokens);
  setup.cancel_fraction = args.cancel_fraction;
  setup.temperature = args.temperature;
  if (args.json) {
    std::printf("%s\n", ReportJson(setup, report).dump(2).c_str());
  } else {
    std::printf("%s", ReportText(setup, report).c_str());
  }
  std::fflush(stdout);
  return report.passed() ? 0 : 1;
}

}  // namespace

Runner AddBenchServeCommand(CLI::App& app) {
  auto args = std::make_shared<BenchServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench-serve", "load-test petrel serve: concurrent streaming clients, throughput, latency");
  CLI::Option* url = cmd->add_option("--url", args->url, "a running server, http://HOST:PORT");
  CLI::Option* model = cmd->add_option(
      "-m,--model", args->model,
      "start petrel serve with this model on a free loopback port (and read its memory use)");
  url->excludes(model);
  model->excludes(url);
  cmd->add_option("-t,--threads", args->threads, "-m: the server's threads (default: all cores)")
      ->check(IntRange(1, kMaxThreads));
  cmd->add_option("--parallel", args->parallel, "-m: the server's --parallel (default --clients)")
      ->check(IntRange(1, 256));
  cmd->add_option("--serve-arg", args->serve_args,
                  "-m: one more argument for petrel serve (repeat it: --serve-arg=-c "
                  "--serve-arg=1024)");
  cmd->add_option("--shared-prefix-attn", args->shared_prefix_attention,
                  "-m: the server's --shared-prefix-attn, on or off (with --shared-prefix: "
                  "shared KV blocks read once per step for all streams, or once per stream)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--ready-timeout", args->ready_timeout,
                  "-m: seconds the server may take to load (default 600)")
      ->check(IntRange(1, 86400));
  cmd->add_option("--api-key", args->api_key, "sent as Authorization: Bearer KEY");
  cmd->add_option("--clients", args->clients, "concurrent streaming clients (default 8)")
      ->check(IntRange(1, 1024));
  CLI::Option* duration =
      cmd->add_option("--duration", args->duration,
                      "seconds to start requests for; those running then finish (default 60)");
  duration->check(RealRange(0.1, 86400.0));
  CLI::Option* requests =
      cmd->add_option("--requests", args->requests, "requests in all, instead of --duration")
          ->check(IntRange(1, 1 << 24));
  duration->excludes(requests);
  requests->excludes(duration);
  cmd->add_option("--prompt-tokens", args->prompt_tokens,
                  "tokens per prompt, as the server's /tokenize counts them (default 100)")
      ->check(IntRange(2, 1 << 20));
  cmd->add_option("--shared-prefix", args->shared_prefix,
                  "tokens every prompt starts with (the prefix cache serves them; default 0)")
      ->check(IntRange(0, 1 << 20));
  cmd->add_option("--prompt-set", args->prompt_set,
                  "distinct prompts, used in turn (default 256); with temperature 0 each repeat "
                  "must give the same completion")
      ->check(IntRange(1, 1 << 16));
  cmd->add_option("--max-tokens", args->max_tokens, "max_tokens of each request (default 64)")
      ->check(IntRange(1, kMaxTokens));
  cmd->add_option("--min-max-tokens", args->min_max_tokens,
                  "draw each request's max_tokens from [this, --max-tokens] (default: always "
                  "--max-tokens)")
      ->check(IntRange(1, kMaxTokens));
  cmd->add_option("--cancel-fraction", args->cancel_fraction,
                  "share of requests whose client hangs up after a random number of streamed "
                  "tokens (default 0); their streams are checked up to there")
      ->check(RealRange(0.0, 1.0));
  cmd->add_option("--temperature", args->temperature, "default 0 (greedy)")
      ->check(RealRange(0.0, 2.0));
  cmd->add_option("--logprobs", args->logprobs,
                  "the requests' logprobs (default 0: each chunk's sampled tokens, which the checks "
                  "count); -1: none, each chunk with text counts as one token")
      ->check(IntRange(-1, 5));
  cmd->add_option("--seed", args->seed, "seeds the prompt set (and the sampling seeds; default 1)")
      ->check(IntRange(0, 1ll << 40));
  cmd->add_flag("--json", args->json, "one JSON object on stdout instead of the text report");
  return [args, cmd]() -> int {
    if (args->url.empty() && args->model.empty()) {
      return Fail(Error("bench-serve needs --url URL (a running server) or -m MODEL"));
    }
    if (!args->model.empty()) {
      std::error_code missing;
      if (!std::filesystem::exists(args->model, missing)) {
        return Fail(Error("%s: no such file or folder", args->model.c_str()));
      }
    } else {
      for (const char* only_with_model :
           {"-t", "--parallel", "--serve-arg", "--ready-timeout", "--shared-prefix-attn"}) {
        if (cmd->count(only_with_model) > 0) {
          return Fail(
              Error("%s applies to a server started with -m, not to --url", only_with_model));
        }
      }
    }
    return Run(*args);
  };
}

}  // namespace petrel::tools
