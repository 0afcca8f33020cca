// `petrel run`: generate a continuation of a prompt (or, with --chat, a reply to it rendered
// through the model's chat template), streamed to stdout or returned as one JSON object.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "core/generation/beam_search.h"
#include "core/chat/chat_prompt.h"
#include "core/generation/generate.h"
#include "core/tokenizer/tokenizer.h"
#include "tools/common.h"
#include "tools/sampling_options.h"

namespace petrel::tools {
namespace {

nlohmann::json LogprobsJson(const Tokenizer& tokenizer, const std::vector<GeneratedToken>& tokens) {
  nlohmann::json out = nlohmann::json::array();
  for (const GeneratedToken& token : tokens) {
    nlohmann::json top = nlohmann::json::array();
    for (const TokenLogprob& alt : token.top) {
      top.push_back({{"id", alt.id}, {"token", std::string(tokenizer.TokenText(alt.id))}, {"logprob", alt.logprob}});
    }
    out.push_back({{"id", token.id}, {"token", std::string(tokenizer.TokenText(token.id))},
                   {"logprob", token.logprob}, {"top_logprobs", top}});
  }
  return out;
}

}  // namespace

Runner AddRunCommand(CLI::App& app) {
  struct Args {
    ModelOptions model;
    SamplingOptions sampling;
    std::string prompt;
    std::string system;
    std::string template_file;
    bool chat = false;
    bool json = false;
    bool no_bos = false;
    size_t beams = 0;
    float length_penalty = 1.0f;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt");
  args->model.AddTo(*cmd);
  args->sampling.AddTo(*cmd);
  cmd->add_option("-p,--prompt", args->prompt, "prompt text");
  cmd->add_flag("--chat", args->chat, "treat the prompt as a user message of the model's chat template");
  cmd->add_option("--system", args->system, "system prompt (needs --chat)");
  cmd->add_option("--chat-template-file", args->template_file,
                  "this Jinja template instead of the model's (needs --chat)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--json", args->json, "print one JSON object instead of streaming");
  cmd->add_flag("--no-bos", args->no_bos, "do not add the BOS token");
  CLI::Option* beams = cmd->add_option("--beams", args->beams,
                                       "beam search with N beams instead of sampling (takes -n and "
                                       "--ignore-eos; other sampling flags are errors)")
                           ->check(IntRange(1, 64));
  CLI::Option* length_penalty =
      cmd->add_option("--length-penalty", args->length_penalty,
                      "with --beams: beam score = log-prob / length^P (default 1)")
          ->check(RealRange(-10, 10));
  return [args, beams, length_penalty]() -> int {
    if (!args->chat && !args->system.empty()) return Fail(Error("--system needs --chat"));
    if (!args->chat && !args->template_file.empty()) {
      return Fail(Error("--chat-template-file needs --chat"));
    }
    if (length_penalty->count() > 0 && beams->count() == 0) {
      return Fail(Error("--length-penalty needs --beams"));
    }
    if (beams->count() > 0) {
      const std::string ignored = args->sampling.GivenExcept({"--n-predict", "--ignore-eos"});
      if (!ignored.empty()) return Fail(Error("%s has no effect with --beams", ignored.c_str()));
      if (args->sampling.n_predict == 0) return Fail(Error("--beams needs -n of at least 1"));
    }
    if (args->sampling.generate.sampling.n_probs > 0 && !args->json) {
      return Fail(Error("--n-probs needs --json (the probabilities are reported there)"));
    }
    if (Status status = args->sampling.Check(); !status.ok()) return Fail(status);
    if (Status status = args->model.Check(); !status.ok()) return Fail(status);
    auto options = args->sampling.ToGenerateOptions();
    if (!options.ok()) return Fail(options.status());
    auto engine = args->model.LoadEngine(args->beams > 0 ? args->beams + 1 : 1);
    if (!engine.ok()) return Fail(engine.status());
    if (args->sampling.n_predict < 0) options->max_new_tokens = (*engine)->context();
    const Tokenizer* tokenizer = (*engine)->tokenizer();
    if (!tokenizer) return Fail(Error("the model has no tokenizer"));
    std::vector<int32_t> prompt_ids;
    if (args->chat) {
      auto chat = args->template_file.empty() ? ChatPrompt::Load(args->model.model_path)
                                              : ChatPrompt::LoadFile(args->template_file);
      if (!chat.ok()) return Fail(chat.status());
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (!args->system.empty()) messages.push_back({{"role", "system"}, {"content", args->system}});
      messages.push_back({{"role", "user"}, {"content", args->prompt}});
      auto ids = chat->Tokenize(*tokenizer, messages, /*add_generation_prompt=*/true);
      if (!ids.ok()) return Fail(ids.status());
      prompt_ids = std::move(ids).value();
    } else {
      EncodeOptions encode;
      encode.add_special = !args->no_bos;
      prompt_ids = tokenizer->Encode(args->prompt, encode);
    }
    if (prompt_ids.empty()) return Fail(Error("the prompt is empty and the model adds no BOS token"));

    const SeqId seq = (*engine)->NewSequence();
    if (args->beams > 0) {
      BeamSearchOptions beam;
      beam.n_beams = args->beams;
      beam.max_new_tokens = args->sampling.n_predict >= 0
                                ? options->max_new_tokens
                                : (*engine)->context() - std::min((*engine)->context(), prompt_ids.size());
      beam.length_penalty = args->length_penalty;
      beam.stop_at_end_of_generation = !options->ignore_eos;
      auto found = BeamSearch(**engine, seq, prompt_ids, beam);
      if (!found.ok()) return Fail(found.status());
      const std::string text = tokenizer->Decode(found->new_ids, /*skip_special=*/true);
      if (args->json) {
        nlohmann::json out = {{"prompt_ids", prompt_ids}, {"new_ids", found->new_ids}, {"text", text},
                              {"score", found->score}, {"logprob", found->logprob},
                              {"stop_reason", found->new_ids.size() < beam.max_new_tokens ? "eos" : "length"}};
        std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      } else {
        std::printf("%s\n", text.c_str());
      }
      return 0;
    }
    auto result = Generate(**engine, seq, prompt_ids, *options, [&](const GeneratedToken&, std::string_view text) {
      if (!args->json && !text.empty()) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      }
      return true;
    });
    if (!result.ok()) return Fail(result.status());
    const double prompt_tps = result->prompt_tokens / std::max(result->prompt_seconds, 1e-9);
    const size_t decoded = result->new_ids.size() > 0 ? result->new_ids.size() - 1 : 0;
    const double gen_tps = decoded / std::max(result->generate_seconds, 1e-9);
    if (args->json) {
      nlohmann::json out;
      out["prompt_ids"] = prompt_ids;
      out["new_ids"] = result->new_ids;
      out["text"] = result->text;
      out["stop_reason"] = result->stop_reason;
      if (!result->stop_string.empty()) out["stop_string"] = result->stop_string;
      if (options->sampling.n_probs > 0) out["logprobs"] = LogprobsJson(*tokenizer, result->tokens);
      out["timings"] = {{"prompt_tokens", result->prompt_tokens},
                        {"prompt_seconds", result->prompt_seconds},
                        {"prompt_tokens_per_second", prompt_tps},
                        {"generated_tokens", result->new_ids.size()},
                        {"generate_seconds", result->generate_seconds},
                        {"generate_tokens_per_second", gen_tps},
                        {"peak_rss_bytes", PeakRssBytes()}};
      std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
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
