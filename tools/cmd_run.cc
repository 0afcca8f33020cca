// `petrel run`: generate a continuation of a prompt, streamed to stdout.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "core/generate.h"
#include "core/tokenizer/tokenizer.h"
#include "tools/common.h"

namespace petrel::tools {

Runner AddRunCommand(CLI::App& app) {
  struct Args {
    ModelOptions model;
    std::string prompt;
    size_t n_predict = 64;
    float temperature = 0.8f;
    int32_t top_k = 40;
    float top_p = 0.95f;
    uint64_t seed = 0;
    bool json = false;
    bool ignore_eos = false;
    bool no_bos = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt");
  args->model.AddTo(*cmd);
  cmd->add_option("-p,--prompt", args->prompt, "prompt text");
  cmd->add_option("-n,--n-predict", args->n_predict, "tokens to generate (default 64)");
  cmd->add_option("--temp", args->temperature, "temperature; 0 = greedy (default 0.8)");
  cmd->add_option("--top-k", args->top_k, "top-k (default 40; 0 = off)");
  cmd->add_option("--top-p", args->top_p, "top-p (default 0.95; 1 = off)");
  cmd->add_option("--seed", args->seed, "random seed (default 0)");
  cmd->add_flag("--json", args->json, "print one JSON object instead of streaming");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating past end-of-generation tokens");
  cmd->add_flag("--no-bos", args->no_bos, "do not add the BOS token");
  return [args]() -> int {
    auto engine = args->model.LoadEngine();
    if (!engine.ok()) return Fail(engine.status());
    const Tokenizer* tokenizer = (*engine)->tokenizer();
    if (!tokenizer) return Fail(Error("the model has no tokenizer"));
    EncodeOptions encode;
    encode.add_special = !args->no_bos;
    std::vector<int32_t> prompt_ids = tokenizer->Encode(args->prompt, encode);
    if (prompt_ids.empty()) return Fail(Error("the prompt is empty and the model adds no BOS token"));

    GenerateOptions options;
    options.max_new_tokens = args->n_predict;
    options.sampling = {args->temperature, args->top_k, args->top_p, args->seed};
    options.stop_at_end_of_generation = !args->ignore_eos;
    StreamDecoder stream(*tokenizer);
    const SeqId seq = (*engine)->NewSequence();
    auto result = Generate(**engine, seq, prompt_ids, options, [&](int32_t token) {
      if (!args->json) {
        std::fputs(stream.Push(token).c_str(), stdout);
        std::fflush(stdout);
      }
      return true;
    });
    if (!result.ok()) return Fail(result.status());
    const double prompt_tps = result->prompt_tokens / std::max(result->prompt_seconds, 1e-9);
    const size_t decoded = result->new_ids.size() > 0 ? result->new_ids.size() - 1 : 0;
    const double gen_tps = decoded / std::max(result->generate_seconds, 1e-9);
    if (args->json) {
      std::vector<int32_t> text_ids = result->new_ids;
      nlohmann::json out;
      out["prompt_ids"] = prompt_ids;
      out["new_ids"] = result->new_ids;
      out["text"] = tokenizer->Decode(text_ids, /*skip_special=*/true);
      out["stop_reason"] = result->stop_reason;
      out["timings"] = {{"prompt_tokens", result->prompt_tokens},
                        {"prompt_seconds", result->prompt_seconds},
                        {"prompt_tokens_per_second", prompt_tps},
                        {"generated_tokens", result->new_ids.size()},
                        {"generate_seconds", result->generate_seconds},
                        {"generate_tokens_per_second", gen_tps},
                        {"peak_rss_bytes", PeakRssBytes()}};
      std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::fputs(stream.Flush().c_str(), stdout);
      std::fputs("\n", stdout);
      std::fflush(stdout);
      std::fprintf(stderr, "prompt: %zu tokens, %.1f tokens/s; generation: %zu tokens, %.1f tokens/s; stop: %s\n",
                   result->prompt_tokens, prompt_tps, result->new_ids.size(), gen_tps,
                   result->stop_reason.c_str());
    }
    return 0;
  };
}

}  // namespace petrel::tools
