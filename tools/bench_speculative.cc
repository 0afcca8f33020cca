// RunSpeculativeBench: plain and speculative greedy generation of the same prompt, alternated.
#include "tools/bench_speculative.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/generation/generate.h"
#include "core/tokenizer/tokenizer.h"
#include "cpu/roofs/compute_roof.h"  // Median

namespace petrel::tools {
namespace {

struct Run {
  double tokens_per_second = 0.0;
  GenerateResult result;
};

Result<Run> GenerateOnce(Engine& engine, const std::vector<int32_t>& prompt,
                         const GenerateOptions& options, Speculator* speculator) {
  if (speculator) speculator->Reset();
  const SeqId seq = engine.NewSequence();
  auto result = Generate(engine, seq, prompt, options, nullptr, speculator);
  engine.FreeSequence(seq);
  if (!result.ok()) return result.status();
  Run run;
  // As `petrel run` counts: the first token comes from the prompt's pass.
  const size_t decoded = result->new_ids.size() > 0 ? result->new_ids.size() - 1 : 0;
  run.tokens_per_second = double(decoded) / std::max(result->generate_seconds, 1e-9);
  run.result = std::move(result).value();
  return run;
}

}  // namespace

int RunSpeculativeBench(const SpeculativeBench& bench) {
  ModelOptions model = bench.model;
  model.load_tokenizer = true;
  auto engine = model.LoadEngine();
  if (!engine.ok()) return Fail(engine.status());
  const Tokenizer* tokenizer = (*engine)->tokenizer();
  if (!tokenizer) return Fail(Error("the model has no tokenizer; speculative bench needs one"));
  EncodeOptions encode;
  encode.add_special = true;
  const std::vector<int32_t> prompt = tokenizer->Encode(bench.prompt, encode);
  if (prompt.empty()) return Fail(Error("the bench prompt has no tokens"));
  if (prompt.size() + bench.n_gen > (*engine)->context()) {
    return Fail(Error("the prompt (%zu tokens) and -n %zu exceed the context of %zu", prompt.size(),
                      bench.n_gen, (*engine)->context()));
  }
  GenerateOptions options;
  options.max_new_tokens = bench.n_gen;
  options.ignore_eos = true;
  options.sampling.temperature = 0.0f;
  auto speculator =
      bench.draft.MakeSpeculator(**engine, model, options.sampling, options.ignore_eos);
  if (!speculator.ok()) return Fail(speculator.status());
  const std::string spec_name =
      "tg" + std::to_string(bench.n_gen) +
      (bench.draft.lookup_ngram > 0 ? "+lookup" + std::to_string(bench.draft.lookup_ngram)
                                    : "+draft");
  std::vector<double> plain_rates, spec_rates, acceptance, per_pass;
  // Passes per chosen draft length over the measured runs (index: drafted tokens, 0: plain).
  std::vector<size_t> lengths(bench.draft.draft_max + 1, 0);
  bool identical = true;
  for (size_t r = 0; r <= bench.repetitions; ++r) {
    auto plain = GenerateOnce(**engine, prompt, options, nullptr);
    if (!plain.ok()) return Fail(plain.status());
    auto spec = GenerateOnce(**engine, prompt, options, speculator->get());
    if (!spec.ok()) return Fail(spec.status());
    identical = identical && plain->result.new_ids == spec->result.new_ids;
    if (r == 0) continue;  // warm-up
    plain_rates.push_back(plain->tokens_per_second);
    spec_rates.push_back(spec->tokens_per_second);
    const GenerateResult& s = spec->result;
    acceptance.push_back(s.draft_tokens ? double(s.draft_accepted) / double(s.draft_tokens) : 0.0);
    per_pass.push_back(double(s.new_ids.size()) / double(std::max<size_t>(s.target_passes, 1)));
    const std::vector<size_t>& chosen = (*speculator)->draft_lengths();
    for (size_t k = 0; k < std::min(chosen.size(), lengths.size()); ++k) lengths[k] += chosen[k];
  }
  // "0:30 1:2 8:5": the lengths drafted, with their pass counts.
  std::string lengths_text;
  for (size_t k = 0; k < lengths.size(); ++k) {
    if (lengths[k] == 0) continue;
    if (!lengths_text.empty()) lengths_text += ' ';
    lengths_text += std::to_string(k) + ":" + std::to_string(lengths[k]);
  }
  const double plain_tps = cpu::Median(plain_rates), spec_tps = cpu::Median(spec_rates);
  const double rate = cpu::Median(acceptance), passes = cpu::Median(per_pass);
  const size_t threads = (*engine)->options().n_threads;
  const std::string draft_name = bench.draft.lookup_ngram > 0
                                     ? "lookup-ngram " + std::to_string(bench.draft.lookup_ngram)
                                     : bench.draft.draft_path;
  if (bench.json) {
    const std::string plain_name = "tg" + std::to_string(bench.n_gen);
    std::printf("%s\n", nlohmann::json({{"model", model.model_path},
                                        {"threads", threads},
                                        {"test", plain_name},
                                        {"prompt_tokens", prompt.size()},
                                        {"tokens_per_second", plain_tps},
                                        {"samples", plain_rates}})
                            .dump()
                            .c_str());
    std::printf("%s\n", nlohmann::json({{"model", model.model_path},
                                        {"threads", threads},
                                        {"test", spec_name},
                                        {"draft", draft_name},
                                        {"prompt_tokens", prompt.size()},
                                        {"tokens_per_second", spec_tps},
                                        {"samples", spec_rates},
                                        {"speedup", spec_tps / std::max(plain_tps, 1e-9)},
                                        {"acceptance_rate", rate},
                                        {"tokens_per_target_pass", passes},
                                        {"draft_lengths", lengths},
                                        {"identical_output", identical}})
                            .dump()
                            .c_str());
  } else {
    std::printf(
        "| model | draft | threads | test | t/s (median) | speedup | acceptance | tokens/pass | "
        "drafted k: passes | same output |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    std::printf("| %s | - | %zu | tg%zu | %.2f | 1.00 | - | 1.00 | - | - |\n",
                model.model_path.c_str(), threads, bench.n_gen, plain_tps);
    std::printf("| %s | %s | %zu | %s | %.2f | %.2f | %.0f %% | %.2f | %s | %s |\n",
                model.model_path.c_str(), draft_name.c_str(), threads, spec_name.c_str(), spec_tps,
                spec_tps / std::max(plain_tps, 1e-9), 100.0 * rate, passes, lengths_text.c_str(),
                identical ? "yes" : "NO");
  }
  // Greedy speculative output must be the plain output; anything else is a bug to report.
  if (!identical) return Fail(Error("speculative output differs from plain decoding"));
  return 0;
}

}  // namespace petrel::tools
