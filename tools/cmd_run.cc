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
    int64_t keep = 0;
    bool no_context_shift = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt");
  args->model.AddTo(*cmd);
  args->sampling.AddTo(*cmd);
  cmd->add_option("-p,--prompt", args->prompt, "prompt text");
  cmd->add_flag("--chat", args->chat, "treat the prompt as a user message of the model's chat template");
  cmd->add_option("--system", args->system, "system prompt (with --chat)");
  cmd->add_option("--chat-template-file", args->template_file, "with --chat: this Jinja template instead of the model's");
  cmd->add_flag("--json", args->json, "print one JSON object instead of streaming");
  cmd->add_flag("--no-bos", args->no_bos, "do not add the BOS token");
  cmd->add_option("--beams", args->beams, "beam search with N beams instead of sampling");
  cmd->add_option("--length-penalty", args->length_penalty, "beam score = log-prob / length^P (default 1)");
  cmd->add_option("--keep", args->keep,
                  "prompt tokens after the BOS (always kept) that a context shift never drops "
                  "(0..context, default 0; past the prompt: all of it)");
  cmd->add_flag("--no-context-shift", args->no_context_shift,
                "stop at a full context (reason \"context\") instead of dropping the oldest half");
  return [args]() -> int {
    auto options = args->sampling.ToGenerateOptions();
    if (!options.ok()) return Fail(options.status());
    if (args->beams > 64) return Fail(Error("--beams %zu is out of range (1..64)", args->beams));
    auto engine = args->model.LoadEngine(args->beams > 0 ? args->beams + 1 : 1);
    if (!engine.ok()) return Fail(engine.status());
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
    if (args->keep < 0 || size_t(args->keep) > (*engine)->context()) {
      return Fail(Error("--keep %lld is out of range (0..%zu, the context)", (long long)args->keep,
                        (*engine)->context()));
    }
    // As llama.cpp's --keep: counted after the BOS token, which a shift always keeps.
    const size_t bos = tokenizer->bos_id() >= 0 && prompt_ids[0] == tokenizer->bos_id() ? 1 : 0;
    options->keep = bos + std::min(size_t(args->keep), prompt_ids.size() - bos);
    options->context_shift = !args->no_context_shift;

    const SeqId seq = (*engine)->NewSequence();
    if (args->beams > 0) {
      BeamSearchOptions beam;
      beam.n_beams = args->beams;
      beam.max_new_tokens = options->max_new_tokens;
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
                        {"context_shifts", result->context_shifts},
                        {"shift_seconds", result->shift_seconds},
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
