// `petrel bench`: prompt-processing and generation speed, like llama-bench, plus peak RSS.
// Each test runs once to warm up, then `-r` times; medians and min–max are reported. Every
// generation run is paired with the read roof (ReadRoof), every prompt run with the arithmetic
// peak of its weights' path (PromptRoof), sampled just before and just after the run: the run's
// bound is the mean of the two (on a shared host one sample after a run of seconds moved the
// fraction by ±15 %), and the median of the per-run ratios says which fraction of the bound the
// runs reach.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cpu/roofs/compute_roof.h"  // Median
#include "cpu/kernels.h"       // SimdTargetName
#include "cpu/matmul/bf16_dot.h"  // Bf16DotSupported
#include "tools/bench_speculative.h"
#include "tools/common.h"
#include "tools/prompt_roof.h"
#include "tools/read_roof.h"

namespace petrel::tools {
namespace {

struct Sample {
  double median, min, max;
};

// The JSON lines' "bf16_dot": which float weights ran on `vdpbf16ps` ("BF16", "F16, BF16"), or
// "off" (asked, or no AVX512-BF16 here).
std::string BenchBf16Dot(const std::string& option) {
  if (option == "off" || !cpu::Bf16DotSupported()) return "off";
  return option == "on" ? "F16, BF16" : "BF16";
}

Sample Summarize(std::vector<double> rates) {
  if (rates.empty()) return {0.0, 0.0, 0.0};
  const auto [min, max] = std::minmax_element(rates.begin(), rates.end());
  return {cpu::Median(rates), *min, *max};
}

// Tokens per second of one run: a prompt of `n_prompt` tokens, or `n_gen` steps of
// `step_tokens` tokens of one sequence each (1: decoding; more: passes shaped like a speculative
// verification). For steps of several tokens the rate is passes per second, so that it compares
// with decoding's directly: their ratio is what a verification pass costs in decode steps.
// `seq` already holds `depth` tokens (llama-bench's -d): the run appends after them and is
// truncated back to them at the end, so that every repetition sees the same cache.
Result<double> RunOnce(Engine& engine, SeqId seq, size_t depth, size_t n_prompt, size_t n_gen,
                       size_t step_tokens, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> token(0, int32_t(engine.config().n_vocab - 1));
  std::vector<float> logits;
  const auto start = std::chrono::steady_clock::now();
  if (n_prompt > 0) {
    std::vector<int32_t> tokens(n_prompt);
    for (int32_t& t : tokens) t = token(rng);
    PETREL_RETURN_IF_ERROR(engine.Prefill(seq, tokens, false, &logits));
  }
  Batch batch;
  for (size_t i = 0; i < n_gen; ++i) {
    batch.Clear();
    for (size_t j = 0; j < step_tokens; ++j) {
      batch.Add(token(rng), int32_t(depth + i * step_tokens + j), seq, true);
    }
    PETREL_RETURN_IF_ERROR(engine.Decode(batch, &logits));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PETREL_RETURN_IF_ERROR(engine.TruncateSequence(seq, depth));
  return double(n_prompt + n_gen) / std::max(seconds, 1e-9);
}

// The same over `seqs` sequences decoded together, as llama-batched-bench's phases and as
// `petrel serve` steps them (Engine::Step): a prompt of `n_prompt` tokens for each (steps of as
// many prompts as a batch holds, a longer one in pieces), or `n_gen` steps of one token for
// each. Tokens per second over all sequences.
Result<double> RunParallelOnce(Engine& engine, std::span<const SeqId> seqs, size_t depth,
                               size_t n_prompt, size_t n_gen, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> token(0, int32_t(engine.config().n_vocab - 1));
  const size_t batch_tokens = engine.options().max_batch_tokens;
  std::vector<std::vector<int32_t>> prompts(seqs.size(), std::vector<int32_t>(n_prompt));
  for (std::vector<int32_t>& prompt : prompts) {
    for (int32_t& t : prompt) t = token(rng);
  }
  std::vector<int32_t> next(seqs.size());
  std::vector<StepInput> inputs;
  std::vector<StepOutput> outputs;
  const auto step = [&]() -> Status {
    PETREL_RETURN_IF_ERROR(engine.Step(inputs, &outputs));
    for (const StepOutput& output : outputs) PETREL_RETURN_IF_ERROR(output.status);
    inputs.clear();
    return Status::Ok();
  };
  const auto start = std::chrono::steady_clock::now();
  size_t in_step = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (size_t fed = 0; fed < n_prompt;) {
      if (in_step == batch_tokens) {
        PETREL_RETURN_IF_ERROR(step());
        in_step = 0;
      }
      const size_t take = std::min(n_prompt - fed, batch_tokens - in_step);
      inputs.push_back({seqs[s], std::span<const int32_t>(prompts[s]).subspan(fed, take),
                        fed + take == n_prompt});
      fed += take;
      in_step += take;
    }
  }
  if (!inputs.empty()) PETREL_RETURN_IF_ERROR(step());
  for (size_t i = 0; i < n_gen; ++i) {
    for (size_t s = 0; s < seqs.size(); ++s) {
      next[s] = token(rng);
      inputs.push_back({seqs[s], std::span<const int32_t>(&next[s], 1), true});
    }
    PETREL_RETURN_IF_ERROR(step());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const SeqId seq : seqs) PETREL_RETURN_IF_ERROR(engine.TruncateSequence(seq, depth));
  return double(seqs.size() * (n_prompt + n_gen)) / std::max(seconds, 1e-9);
}

}  // namespace

Runner AddBenchCommand(CLI::App& app) {
  struct Args {
    ModelOptions model;
    std::vector<size_t> prompts = {128, 512};
    std::vector<size_t> gens = {64};
    std::vector<size_t> depths = {0};
    std::vector<size_t> threads;
    std::vector<std::string> cache_types;  // empty: --cache-type's default
    size_t repetitions = 5;
    bool json = false;
    bool profile = false;
    std::vector<size_t> step_tokens = {1};
    std::vector<size_t> parallel = {1};
    DraftOptions draft;
    std::string prompt =
        "Once upon a time, there was a little girl named Lily. She loved to play in the park "
        "with her friends. One day, she found a big red ball under a tree.";
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench", "measure prompt and generation speed");
  args->model.AddTo(*cmd, /*threads_option=*/false);
  args->model.mpi.AddTo(*cmd);
  // Lists are comma-separated; the range check applies to each element.
  cmd->add_option("-p,--n-prompt", args->prompts, "prompt lengths, e.g. 128,512 (default 128,512; 0: none)")
      ->delimiter(',')
      ->check(IntRange(0, kMaxTokens));
  cmd->add_option("-n,--n-gen", args->gens, "generation lengths (default 64; 0: none)")
      ->delimiter(',')
      ->check(IntRange(0, kMaxTokens));
  cmd->add_option("-d,--n-depth", args->depths,
                  "tokens already in the cache before each test, e.g. 0,4096,16384 (default 0; "
                  "llama-bench's -d): tests are named pp512 @ d4096; prompts at depth > 0 have no roof")
      ->delimiter(',')
      ->check(IntRange(0, kMaxContext));
  // A list here, one engine per type (the cache's type is fixed when it is made). llama.cpp's
  // -ctk/-ctv arrive as this option (tools/llama_flags.cc): petrel keeps K and V in one type.
  cmd->remove_option(cmd->get_option("--cache-type"));
  cmd->add_option("--cache-type", args->cache_types,
                  "KV cache types to test, e.g. f16,q8_0 (default f16; -ctk/-ctv with the same "
                  "list as llama-bench's)")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "f16", "q8_0"}));
  cmd->add_option("-t,--threads", args->threads,
                  "thread counts to test, e.g. 1,2 (default: all cores; more than the CPUs: capped, "
                  "with a warning)")
      ->delimiter(',')
      ->check(IntRange(1, kMaxThreads));
  cmd->add_option("-r,--repetitions", args->repetitions, "repetitions per test (default 5)")
      ->check(IntRange(1, 1000));
  cmd->add_option("--step-tokens", args->step_tokens,
                  "tokens per generation step, e.g. 1,2,4 (default 1): a step of k tokens is "
                  "shaped like a speculative verification; test tgN for 1, else tgNxK, rated "
                  "in steps per second")
      ->delimiter(',')
      ->check(IntRange(1, 64));
  cmd->add_option("--parallel", args->parallel,
                  "sequences decoded together, e.g. 1,8,32 (default 1): with more than one, each "
                  "test runs that many sequences in the server's steps, as llama-batched-bench "
                  "-npl (pp100 b32: 32 prompts of 100 tokens; tg64 b32: 64 steps of a token for "
                  "each of 32), rated in tokens per second over all of them")
      ->delimiter(',')
      ->check(IntRange(1, 256));
  cmd->add_flag("--json", args->json, "print JSON lines instead of a table");
  cmd->add_flag("--profile", args->profile,
                "time each op (on the devices that can, or on the CPU when everything runs "
                "there): per test, op, calls, total ms and share (a second table, or "
                "\"profile\" in each JSON line)");
  args->draft.AddTo(*cmd);
  CLI::Option* prompt = cmd->add_option(
      "--prompt", args->prompt,
      "with --draft or --lookup-ngram: the prompt of the greedy generations compared (default: "
      "the start of a short story)");
  return [args, prompt]() -> int {
    if (Status status = args->model.Check(); !status.ok()) return Fail(status);
    if (Status status = args->draft.Check(); !status.ok()) return Fail(status);
    if (prompt->count() > 0 && !args->draft.enabled()) {
      return Fail(Error("--prompt needs --draft or --lookup-ngram"));
    }
    if (args->draft.enabled()) {
      // Speculation needs text that continues: one greedy generation, with and without it.
      if (args->profile)
        return Fail(Error("--profile does not combine with --draft or --lookup-ngram"));
      SpeculativeBench bench;
      bench.model = args->model;
      if (!args->threads.empty()) bench.model.n_threads = CapThreads(args->threads.front(), "-t");
      if (!args->cache_types.empty()) bench.model.kv_type = args->cache_types.front();
      bench.draft = args->draft;
      bench.prompt = args->prompt;
      bench.n_gen = 128;
      for (size_t n : args->gens) {
        if (n > 0) {
          bench.n_gen = n;
          break;
        }
      }
      bench.repetitions = args->repetitions;
      bench.json = args->json;
      if (bench.model.context == 0) bench.model.context = 1024;
      return RunSpeculativeBench(bench);
    }
    const std::vector<size_t>* prompts = &args->prompts;
    const std::vector<size_t>* gens = &args->gens;
    std::vector<size_t> thread_counts;
    for (const size_t threads : args->threads) {
      const size_t capped = CapThreads(threads, "-t");
      if (std::find(thread_counts.begin(), thread_counts.end(), capped) == thread_counts.end()) {
        thread_counts.push_back(capped);
      }
    }
    if (thread_counts.empty()) thread_counts.push_back(args->model.n_threads);
    std::vector<std::string> cache_types;
    for (const std::string& type : args->cache_types) {
      if (std::find(cache_types.begin(), cache_types.end(), type) == cache_types.end()) {
        cache_types.push_back(type);
      }
    }
    if (cache_types.empty()) cache_types.push_back(args->model.kv_type);
    struct EngineSetup {
      std::string cache_type;
      size_t threads;
    };
    std::vector<EngineSetup> setups;
    for (const std::string& type : cache_types) {
      for (size_t threads : thread_counts) setups.push_back({type, threads});
    }
    size_t longest = 16;
    for (size_t p : *prompts) longest = std::max(longest, p);
    size_t most_step_tokens = 1;
    for (size_t k : args->step_tokens) most_step_tokens = std::max(most_step_tokens, k);
    for (size_t n : *gens) longest = std::max(longest, n * most_step_tokens);
    longest += *std::max_element(args->depths.begin(), args->depths.end());
    const size_t most_parallel = *std::max_element(args->parallel.begin(), args->parallel.end());
    if (most_parallel > 1 && most_step_tokens > 1) {
      return Fail(Error("--parallel %zu with --step-tokens %zu: steps of several tokens are "
                        "measured for one sequence only",
                        most_parallel, most_step_tokens));
    }
    bool header = false;
    // --profile in table mode: one row per (test, backend, op), printed after the speed table.
    std::vector<std::string> profile_rows;
    for (const EngineSetup& setup : setups) {
      ModelOptions model = args->model;
      model.n_threads = setup.threads;
      model.kv_type = setup.cache_type;
      if (model.context == 0) model.context = longest;
      model.load_tokenizer = false;  // random token ids, never text
      auto engine = model.LoadEngine(most_parallel);
      if (!engine.ok()) return Fail(engine.status());
      // A depth the context cannot hold with its tests is refused before any output.
      const size_t deepest = *std::max_element(args->depths.begin(), args->depths.end());
      if (deepest > 0 && longest > (*engine)->context()) {
        return Fail(Error("-d %zu: %zu tokens in the cache plus the longest test's %zu exceed the "
                          "context of %zu (raise -c)",
                          deepest, deepest, longest - deepest, (*engine)->context()));
      }
      // After the first load, so that a model that does not load is one error line.
      if (!header) {
        header = true;
        std::fprintf(stderr, "SIMD target: %s\n", cpu::SimdTargetName().c_str());
        if (const std::string dot = BenchBf16Dot(args->model.bf16_dot); dot != "off") {
          std::fprintf(stderr, "bf16 dot: %s mat_muls on vdpbf16ps, bf16 activations\n",
                       dot.c_str());
        }
        if (args->model.device != "cpu") {
          std::fprintf(stderr, "placement: %s\n", (*engine)->PlacementString().c_str());
        }
        if (!args->json) {
          std::printf(
              "| model | threads | KV | test | t/s (median) | min – max | of roof | peak RSS MiB "
              "|\n");
          std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        }
      }
      std::mt19937 rng(1234);
      struct Test {
        std::string name;
        size_t n_prompt, n_gen, step_tokens, depth, seqs;
      };
      std::vector<Test> tests;
      for (size_t d : args->depths) {
        const std::string at = d > 0 ? " @ d" + std::to_string(d) : "";
        for (size_t b : args->parallel) {
          const std::string in = (b > 1 ? " b" + std::to_string(b) : "") + at;
          for (size_t p : *prompts)
            if (p) tests.push_back({"pp" + std::to_string(p) + in, p, 0, 1, d, b});
          for (size_t n : *gens) {
            for (size_t k : args->step_tokens) {
              if (n == 0) continue;
              tests.push_back(
                  {"tg" + std::to_string(n) + (k > 1 ? "x" + std::to_string(k) : "") + in, 0, n,
                   k, d, b});
            }
          }
        }
      }
      const size_t used_threads = (*engine)->options().n_threads;
      // The K/V (or latent) rows of one cached token, all layers: a step reads each once.
      const size_t kv_token_bytes = (*engine)->kv_layers() * (*engine)->kv_row_bytes() *
                                    ((*engine)->kv_has_values() ? 2 : 1);
      const PromptRoof prompt_roof((*engine)->model().weights,
                                   (*engine)->model().config.n_experts_used);
      // All on the CPU: its own op times (with a device, only the device's are shown).
      if (args->profile) (*engine)->EnableProfiling(true, args->model.device == "cpu");
      for (const Test& test : tests) {
        std::vector<double> rates, roof_rates, fractions;
        // The depth's tokens of each sequence, prefilled once (untimed) for all the repetitions.
        std::vector<SeqId> seqs;
        std::vector<std::span<const uint8_t>> kv_rows;
        for (size_t i = 0; i < test.seqs; ++i) {
          const SeqId seq = seqs.emplace_back((*engine)->NewSequence());
          if (test.depth > 0) {
            std::uniform_int_distribution<int32_t> token(0,
                                                         int32_t((*engine)->config().n_vocab - 1));
            std::vector<int32_t> fill(test.depth);
            for (int32_t& t : fill) t = token(rng);
            std::vector<float> logits;
            if (Status status = (*engine)->Prefill(seq, fill, false, &logits); !status.ok()) {
              return Fail(status.Wrap("-d " + std::to_string(test.depth)));
            }
          }
          const auto rows = (*engine)->HostSequenceKv(seq);
          kv_rows.insert(kv_rows.end(), rows.begin(), rows.end());
        }
        (void)(*engine)->TakeProfile();  // the fill's times are not the test's
        // A generation step reads the active weights and the cached rows of every sequence: on
        // average over the test, depth + (n_gen + 1) / 2 of each, read where the cache holds them
        // (so that the roof adds nothing to the peak RSS); it makes a token for each sequence.
        // The prompt roof counts arithmetic on the weights only, so prompts at depth have none.
        const ReadRoof roof((*engine)->model().weights, (*engine)->model().config.n_experts_used,
                            test.n_gen > 0 ? kv_token_bytes * test.seqs *
                                                 (test.depth + (test.n_gen + 1) / 2)
                                           : 0,
                            kv_rows);
        const bool has_roof =
            test.n_gen > 0 || (test.depth == 0 && prompt_roof.available());
        if (test.n_gen > 0) {
          std::fprintf(stderr, "%s reads per %s: %s\n", test.name.c_str(),
                       test.seqs > 1 ? "step (a token of each sequence)" : "token",
                       roof.step_bytes().ToString().c_str());
        }
        auto sample_roof = [&] {
          return test.n_gen > 0 ? roof.TokensPerSecond(used_threads) * double(test.seqs)
                                : prompt_roof.TokensPerSecond(used_threads);
        };
        double roof_before = 0.0;  // the sample after one run is the one before the next
        for (size_t r = 0; r <= args->repetitions; ++r) {
          if (r == 1 && has_roof) roof_before = sample_roof();
          auto rate = test.seqs == 1
                          ? RunOnce(**engine, seqs[0], test.depth, test.n_prompt, test.n_gen,
                                    test.step_tokens, rng)
                          : RunParallelOnce(**engine, seqs, test.depth, test.n_prompt,
                                            test.n_gen, rng);
          if (!rate.ok()) return Fail(rate.status());
          if (r == 0) {
            (void)(*engine)->TakeProfile();  // the warm-up's times are not the test's
            continue;
          }
          rates.push_back(*rate);
          if (!has_roof) continue;
          const double roof_after = sample_roof();
          roof_rates.push_back(0.5 * (roof_before + roof_after));
          fractions.push_back(*rate / roof_rates.back());
          roof_before = roof_after;
        }
        for (const SeqId seq : seqs) (*engine)->FreeSequence(seq);
        const Sample s = Summarize(rates);
        // Device time per op over the measured repetitions.
        const std::vector<Engine::BackendProfile> profiles =
            args->profile ? (*engine)->TakeProfile() : std::vector<Engine::BackendProfile>{};
        nlohmann::json profile_json = nlohmann::json::array();
        for (const Engine::BackendProfile& profile : profiles) {
          std::vector<OpProfile> ops = profile.ops;
          std::sort(ops.begin(), ops.end(),
                    [](const OpProfile& a, const OpProfile& b) { return a.seconds > b.seconds; });
          double total = 0.0;
          for (const OpProfile& op : ops) total += op.seconds;
          for (const OpProfile& op : ops) {
            const double share = total > 0.0 ? op.seconds / total : 0.0;
            profile_json.push_back({{"backend", profile.backend},
                                    {"op", OpName(op.op)},
                                    {"calls", op.calls},
                                    {"total_ms", op.seconds * 1e3},
                                    {"share", share}});
            char row[256];
            std::snprintf(
                row, sizeof(row), "| %s | %zu | %s | %s | %s | %s | %zu | %.3f | %.1f %% |",
                model.model_path.c_str(), used_threads, model.kv_type.c_str(), test.name.c_str(),
                profile.backend.c_str(), OpName(op.op), op.calls, op.seconds * 1e3, 100.0 * share);
            profile_rows.push_back(row);
          }
        }
        const double rss_mib = double(PeakRssBytes()) / (1024.0 * 1024.0);
        const double fraction = fractions.empty() ? 0.0 : Summarize(fractions).median;
        if (args->json) {
          nlohmann::json line = {{"model", model.model_path},
                                 {"threads", used_threads},
                                 {"ubatch_tokens", (*engine)->options().ubatch_tokens},
                                 {"test", test.name},
                                 {"step_tokens", test.step_tokens},
                                 {"parallel", test.seqs},
                                 {"n_depth", test.depth},
                                 {"type_k", model.kv_type},
                                 {"type_v", model.kv_type},
                                 {"tokens_per_second", s.median},
                                 {"min", s.min},
                                 {"max", s.max},
                                 {"samples", rates},
                                 {"peak_rss_bytes", PeakRssBytes()},
                                 {"weight_bytes", (*engine)->model().weight_bytes},
                                 {"simd_target", cpu::SimdTargetName()},
                                 {"bf16_dot", BenchBf16Dot(args->model.bf16_dot)},
                                 {"device", model.device},
                                 {"gpu_layers", (*engine)->options().device_layers}};
          if (args->profile) line["profile"] = profile_json;
          if (!fractions.empty() && test.n_gen > 0) {
            line["read_roof_tokens_per_second"] = Summarize(roof_rates).median;
            line["read_roof_bytes_per_token"] = roof.bytes_per_token();
            const StepBytes& step = roof.step_bytes();
            line["read_bytes"] = {{"attention", step.attention}, {"ffn", step.ffn},
                                  {"routed_experts", step.routed}, {"head", step.head},
                                  {"kv", step.kv}};
            line["fraction_of_read_roof"] = fraction;
          } else if (!fractions.empty()) {
            const bool int8 = prompt_roof.roof() == cpu::Roof::kInt8Dot;
            line["compute_roof"] = int8 ? "int8_dot" : "f32_fma";
            line["compute_roof_ops_per_second"] =
                Summarize(roof_rates).median * prompt_roof.ops_per_token();
            line["ops_per_token"] = prompt_roof.ops_per_token();
            line["fraction_of_compute_roof"] = fraction;
          }
          std::printf("%s\n", line.dump().c_str());
        } else {
          const std::string of_roof =
              fractions.empty() ? "" : std::to_string(fraction).substr(0, 4);
          std::printf("| %s | %zu | %s | %s | %.2f | %.2f – %.2f | %s | %.1f |\n",
                      model.model_path.c_str(), used_threads, model.kv_type.c_str(),
                      test.name.c_str(), s.median, s.min, s.max, of_roof.c_str(), rss_mib);
        }
        std::fflush(stdout);
      }
    }
    if (args->profile && !args->json) {
      std::printf("\n| model | threads | KV | test | backend | op | calls | total ms | share |\n");
      std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
      for (const std::string& row : profile_rows) std::printf("%s\n", row.c_str());
      if (profile_rows.empty()) std::printf("| (no backend of this run measures op times) |\n");
    }
    return 0;
  };
}

}  // namespace petrel::tools
