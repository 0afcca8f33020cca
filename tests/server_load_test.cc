// The load suite: `petrel bench-serve` drives `petrel serve` on a synthetic small Q4_0 model with
// 32 concurrent streaming clients for PETREL_LOAD_SECONDS (20 by default; 120 for the long run
// by hand). No request may fail, no stream may lose or repeat a token (each chunk's tokens
// against usage, text offsets), greedy repeats of a prompt must agree, and the server's resident
// memory must stay bounded.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "util/cli_runner.h"

namespace petrel::testing {
namespace {

using json = nlohmann::json;

// Made once per build folder: petrel synth is deterministic for a seed.
std::string SynthSmallQ4() {
  const std::string path = ScratchDir() + "/load_synth_small_q4_0.gguf";
  if (!std::filesystem::exists(path)) {
    const std::string partial = path + ".partial." + std::to_string(getpid());
    const Output synth = Petrel({"synth", "--shape", "small", "--type", "q4_0", "-o", partial});
    EXPECT_EQ(synth.exit_code, 0) << synth.err;
    std::filesystem::rename(partial, path);
  }
  return path;
}

TEST(ServerLoadTest, ThirtyTwoStreamingClients) {
  const char* seconds_env = std::getenv("PETREL_LOAD_SECONDS");
  const std::string seconds = seconds_env && *seconds_env ? seconds_env : "20";
  const std::string model = SynthSmallQ4();
  const Output run = Petrel({"bench-serve", "-m", model, "--clients", "32", "--duration", seconds,
                             "--max-tokens", "64", "--prompt-tokens", "100", "--prompt-set", "16",
                             "-t", "2", "--serve-arg=-c", "--serve-arg=512", "--json"});
  const json report = json::parse(run.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.out << run.err;
  std::printf("%s\n", report.dump().c_str());  // for the log: throughput and latencies
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(report["requests_failed"], 0) << report["problems"].dump();
  EXPECT_EQ(report["check_failures"], 0) << report["problems"].dump();
  EXPECT_GE(report["requests_ok"].get<int>(), 32);
  // 16 prompts over more requests than that: greedy repeats were compared.
  EXPECT_GT(report["repeated_prompts_compared"].get<int>(), 0);
  EXPECT_GT(report["generation_tokens_per_s"].get<double>(), 0);
  // The server's step time during the run, by part, from its /metrics: within the run's time.
  ASSERT_TRUE(report["server_steps"].is_object()) << report.dump();
  const json& steps = report["server_steps"];
  EXPECT_GT(steps["steps"].get<double>(), 64) << steps.dump();
  EXPECT_GT(steps["engine_s"].get<double>(), 0) << steps.dump();
  EXPECT_LE(steps["engine_s"].get<double>() + steps["consume_s"].get<double>() +
                steps["scheduling_s"].get<double>(),
            report["elapsed_s"].get<double>() + 1.0)
      << steps.dump();
  // Memory: the model file (mapped), 32 contexts of 512 tokens of f16 KV, activations; what
  // load adds on top of the ready server stays small (no growth per request).
  ASSERT_TRUE(report["server_rss_peak_mib"].is_number()) << report.dump();
  const double model_mib = double(std::filesystem::file_size(model)) / (1 << 20);
  EXPECT_LT(report["server_rss_peak_mib"].get<double>(), model_mib + 1536) << report.dump();
  EXPECT_LT(
      report["server_rss_peak_mib"].get<double>() - report["server_rss_start_mib"].get<double>(),
      512)
      << report.dump();
}

}  // namespace
}  // namespace petrel::testing
