// `petrel run`: generate a continuation of a prompt (or, with --chat, a reply to it rendered
// through the model's chat template), streamed to stdout or returned as one JSON object. Ctrl-C
// stops the generation: the text so far and the stats line are printed and the exit status is
// 130, as shells expect after SIGINT; a second Ctrl-C kills at once.
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/base/log.h"
#include "core/chat/chat_prompt.h"
#include "core/generation/beam_search.h"
#include "core/generation/generate.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/unicode.h"
#include "tools/cli_ux.h"
#include "tools/common.h"
#include "tools/draft_options.h"
#include "tools/sampling_options.h"

namespace petrel::tools {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

// The first SIGINT sets the flag the token callback checks; SA_RESETHAND restores the default
// action, so a second one ends the process at once.
void InstallInterruptHandler() {
  struct sigaction action = {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
}

// Exit status after a generation stopped by Ctrl-C: 128 + SIGINT.
constexpr int kInterruptedExit = 128 + SIGINT;

Result<std::string> ReadPromptFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error("-f %s: cannot open the prompt file (%s)", path.c_str(), std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error("-f %s: cannot read the prompt file", path.c_str());
  return text.str();
}

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

// --prompt-ids "1,2,3": token ids separated by commas (spaces around them allowed).
Result<std::vector<int32_t>> ParsePromptIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t first = item.find_first_not_of(" \t");
    const size_t last = item.find_last_not_of(" \t");
    const std::string id_text =
        first == std::string::npos ? "" : item.substr(first, last - first + 1);
    int64_t id = -1;
    const auto [end, error] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
    if (id_text.empty() || error != std::errc() || end != id_text.data() + id_text.size() ||
        id < 0 || id > INT32_MAX) {
      return Error("--prompt-ids: '%s' is not a token id (expected ids like 1,2,3)",
                   id_text.c_str());
    }
    ids.push_back(int32_t(id));
  }
  if (ids.empty()) return Error("--prompt-ids: no token ids given (expected ids like 1,2,3)");
  return ids;
}

}  // namespace

Runner AddRunCommand(CLI::App& app) {
  struct Args {
    ModelOptions model;
    SamplingOptions sampling;
    DraftOptions draft;
    std::string prompt;
    std::string prompt_file;
    std::string prompt_ids;
    std::string system;
    std::string template_file;
    bool chat = false;
    bool json = false;
    bool color = false;
    bool no_bos = false;
    bool escape = false;
    bool special = false;
    size_t beams = 0;
    float length_penalty = 1.0f;
    int64_t keep = 0;
    bool no_context_shift = false;
    bool context_shift = false;
    bool allow_invalid_utf8 = false;
    bool profile = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt");
  args->model.AddTo(*cmd);
  args->model.mpi.AddTo(*cmd);
  args->sampling.AddTo(*cmd);
  args->draft.AddTo(*cmd);
  CLI::Option* prompt = cmd->add_option("-p,--prompt", args->prompt, "prompt text");
  CLI::Option* prompt_file =
      cmd->add_option("-f,--file", args->prompt_file, "read the prompt from this file")
          ->excludes(prompt);
  cmd->add_option("--prompt-ids", args->prompt_ids,
                  "the prompt as token ids, e.g. 1,15043,3186: used as given (no BOS added), to "
                  "continue exactly what another engine was fed")
      ->excludes(prompt)
      ->excludes(prompt_file);
  cmd->add_flag("-e,--escape", args->escape,
                "process escapes (\\n \\t \\\\ \\\" \\xHH ...) in the prompt (-p or -f), --stop, --system (default off)");
  cmd->add_flag("--special", args->special,
                "print special tokens, end-of-generation ones included (default: left out)");
  cmd->add_flag("--chat", args->chat, "treat the prompt as a user message of the model's chat template");
  cmd->add_option("--system", args->system, "system prompt (needs --chat)");
  cmd->add_option("--chat-template-file", args->template_file,
                  "this Jinja template instead of the model's (needs --chat)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--json", args->json, "print one JSON object instead of streaming");
  cmd->add_flag("--color", args->color,
                "show the generated text in color when stdout is a terminal (default off; never "
                "escape codes into a pipe or file)");
  cmd->add_flag("--no-bos", args->no_bos, "do not add the BOS token");
  CLI::Option* beams = cmd->add_option("--beams", args->beams,
                                       "beam search with N beams instead of sampling (takes -n and "
                                       "--ignore-eos; other sampling flags are errors)")
                           ->check(IntRange(1, 64));
  CLI::Option* length_penalty =
      cmd->add_option("--length-penalty", args->length_penalty,
                      "with --beams: beam score = log-prob / length^P (default 1)")
          ->check(RealRange(-10, 10));
  cmd->add_option("--keep", args->keep,
                  "prompt tokens after the BOS (always kept) that a context shift never drops "
                  "(0..context, default 0; past the prompt: all of it)");
  cmd->add_flag("--no-context-shift", args->no_context_shift,
                "stop at a full context (reason \"context\") instead of dropping the oldest half");
  cmd->add_flag("--context-shift", args->context_shift,
                "shift the context when it fills (the default with -n N; with -n -1 only when given)");
  cmd->add_flag("--allow-invalid-utf8", args->allow_invalid_utf8,
                "accept a prompt that is not valid UTF-8 (a warning; its bad bytes are tokenized as "
                "the vocabulary does)");
  cmd->add_flag("--profile", args->profile,
                "time each op on the devices that can (per op: calls, total ms, share), printed to "
                "stderr after the run");
  return [args, beams, length_penalty]() -> int {
    if (!args->chat && !args->system.empty()) return Fail(Error("--system needs --chat"));
    std::vector<int32_t> given_ids;
    if (!args->prompt_ids.empty()) {
      if (args->chat) return Fail(Error("--prompt-ids cannot be used with --chat"));
      if (args->escape) return Fail(Error("--escape has no effect with --prompt-ids"));
      auto ids = ParsePromptIds(args->prompt_ids);
      if (!ids.ok()) return Fail(ids.status());
      given_ids = std::move(ids).value();
    }
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
    if (beams->count() > 0 && args->draft.enabled()) {
      return Fail(Error("--beams does not combine with --draft or --lookup-ngram"));
    }
    if (Status status = args->sampling.Check(); !status.ok()) return Fail(status);
    if (Status status = args->draft.Check(); !status.ok()) return Fail(status);
    if (Status status = args->model.Check(); !status.ok()) return Fail(status);
    auto options = args->sampling.ToGenerateOptions();
    if (!options.ok()) return Fail(options.status());
    std::string prompt_text = args->prompt;
    std::string system = args->system;
    if (!args->prompt_file.empty()) {
      auto text = ReadPromptFile(args->prompt_file);
      if (!text.ok()) return Fail(text.status());
      prompt_text = std::move(text).value();
    }
    // Checked as the user wrote it: -e's \xHH escapes may spell bytes on purpose.
    if (const size_t bad = tok::FirstInvalidUtf8(prompt_text); bad != std::string::npos) {
      const std::string where = args->prompt_file.empty() ? "-p" : "-f " + args->prompt_file;
      if (!args->allow_invalid_utf8) {
        return Fail(Error("%s: the prompt is not valid UTF-8 at byte offset %zu (0x%02x); fix the "
                          "text or pass --allow-invalid-utf8",
                          where.c_str(), bad, unsigned(uint8_t(prompt_text[bad]))));
      }
      Warn("%s: the prompt is not valid UTF-8 at byte offset %zu; tokenized as it is", where.c_str(), bad);
    }
    if (args->escape) {
      prompt_text = ProcessEscapes(prompt_text);
      system = ProcessEscapes(system);
      for (std::string& stop : options->stop) stop = ProcessEscapes(stop);
    }
    options->skip_special = !args->special;
    auto engine = args->model.LoadEngine(args->beams > 0 ? args->beams + 1 : 1);
    if (!engine.ok()) return Fail(engine.status());
    options->sampling.seed = SharedSeed(options->sampling.seed);
    PETREL_LOG_INFO("sampling: seed %llu", (unsigned long long)options->sampling.seed);
    auto speculator =
        args->draft.MakeSpeculator(**engine, args->model, options->sampling, options->ignore_eos);
    if (!speculator.ok()) return Fail(speculator.status());
    if (args->profile) (*engine)->EnableProfiling(true);
    // After a generation: what each backend measured.
    auto print_profile = [&] {
      if (!args->profile) return;
      const std::string profile = FormatProfile((*engine)->TakeProfile());
      std::fputs(profile.empty() ? "profile: no backend of this run measures op times\n" : profile.c_str(),
                 stderr);
    };
    const Tokenizer* tokenizer = (*engine)->tokenizer();
    if (!tokenizer) return Fail(Error("the model has no tokenizer"));
    std::vector<int32_t> prompt_ids;
    if (args->chat) {
      auto chat = args->template_file.empty() ? ChatPrompt::Load(args->model.model_path)
                                              : ChatPrompt::LoadFile(args->template_file);
      if (!chat.ok()) return Fail(chat.status());
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
      messages.push_back({{"role", "user"}, {"content", prompt_text}});
      auto ids = chat->Tokenize(*tokenizer, messages, /*add_generation_prompt=*/true);
      if (!ids.ok()) return Fail(ids.status());
      prompt_ids = std::move(ids).value();
    } else if (!given_ids.empty()) {
      const int64_t n_vocab = (*engine)->config().n_vocab;
      for (const int32_t id : given_ids) {
        if (id >= n_vocab) {
          return Fail(Error("--prompt-ids: token id %d is outside the vocabulary (0..%lld)", id,
                            (long long)(n_vocab - 1)));
        }
      }
      prompt_ids = std::move(given_ids);
    } else {
      EncodeOptions encode;
      encode.add_special = !args->no_bos;
      prompt_ids = tokenizer->Encode(prompt_text, encode);
    }
    if (prompt_ids.empty()) return Fail(Error("the prompt is empty and the model adds no BOS token"));
    if (args->keep < 0 || size_t(args->keep) > (*engine)->context()) {
      return Fail(Error("--keep %lld is out of range (0..%zu, the context)", (long long)args->keep,
                        (*engine)->context()));
    }
    // As llama.cpp's --keep: counted after the BOS token, which a shift always keeps.
    const size_t bos = tokenizer->bos_id() >= 0 && prompt_ids[0] == tokenizer->bos_id() ? 1 : 0;
    options->keep = bos + std::min(size_t(args->keep), prompt_ids.size() - bos);
    // -n -1 generates until the end of generation or a full context (stop reason "context");
    // -n N shifts the context to reach N unless told not to.
    if (args->context_shift && args->no_context_shift) {
      return Fail(Error("--context-shift and --no-context-shift contradict each other"));
    }
    options->context_shift =
        args->sampling.n_predict < 0 ? args->context_shift : !args->no_context_shift;

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
      print_profile();
      // --json "text" is the decode of new_ids as the reference tokenizers give it; the streamed
      // text leaves out end markers a model spells out (EndTextFilter).
      const std::string text = tokenizer->Decode(found->new_ids, !args->special);
      if (args->json) {
        nlohmann::json out = {{"prompt_ids", prompt_ids}, {"new_ids", found->new_ids}, {"text", text},
                              {"score", found->score}, {"logprob", found->logprob},
                              {"stop_reason", found->new_ids.size() < beam.max_new_tokens ? "eos" : "length"}};
        std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      } else {
        EndTextFilter end_text(tokenizer, args->special);
        std::printf("%s\n", (end_text.Push(text) + end_text.Flush()).c_str());
      }
      return 0;
    }
    // The streamed text leaves out end markers a model spells out (EndTextFilter); --json "text"
    // keeps them, as the reference tokenizers decode new_ids.
    EndTextFilter end_text(tokenizer, args->special || args->json);
    std::string text;  // what was printed, or goes into --json "text"
    // Escape codes only where a terminal shows them: a pipe or file gets the plain text.
    const bool color = args->color && !args->json && ::isatty(STDOUT_FILENO);
    if (color) std::fputs("\033[33m", stdout);
    auto emit = [&](const std::string& piece) {
      text += piece;
      if (!args->json && !piece.empty()) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
    };
    g_interrupted = 0;
    InstallInterruptHandler();
    auto result = Generate(
        **engine, seq, prompt_ids, *options,
        [&](const GeneratedToken&, std::string_view piece) {
          emit(end_text.Push(piece));
          return g_interrupted == 0;
        },
        speculator->get());
    signal(SIGINT, SIG_DFL);
    if (!result.ok()) {
      if (color) std::fputs("\033[0m\n", stdout);
      std::fflush(stdout);
      return Fail(result.status());
    }
    emit(end_text.Flush());
    // With --special the end-of-generation token that stopped it is shown too.
    if (args->special && result->stop_reason == "eos" && !result->new_ids.empty()) {
      emit(std::string(tokenizer->TokenText(result->new_ids.back())));
    }
    const int exit_code = result->stop_reason == "cancelled" && g_interrupted ? kInterruptedExit : 0;
    const double prompt_tps = result->prompt_tokens / std::max(result->prompt_seconds, 1e-9);
    const size_t decoded = result->new_ids.size() > 0 ? result->new_ids.size() - 1 : 0;
    const double gen_tps = decoded / std::max(result->generate_seconds, 1e-9);
    if (args->json) {
      nlohmann::json out;
      out["prompt_ids"] = prompt_ids;
      out["new_ids"] = result->new_ids;
      out["text"] = text;
      out["stop_reason"] = result->stop_reason;
      out["seed"] = options->sampling.seed;
      if (!result->stop_string.empty()) out["stop_string"] = result->stop_string;
      if (options->sampling.n_probs > 0) out["logprobs"] = LogprobsJson(*tokenizer, result->tokens);
      out["timings"] = {
          {"prompt_tokens", result->prompt_tokens},
          {"prompt_seconds", result->prompt_seconds},
          {"prompt_tokens_per_second", prompt_tps},
          {"generated_tokens", result->new_ids.size()},
          {"generate_seconds", result->generate_seconds},
          {"generate_tokens_per_second", gen_tps},
          {"context_shifts", result->context_shifts},
          {"shift_seconds", result->shift_seconds},
          {"target_passes", result->target_passes},
          {"tokens_per_target_pass",
           double(result->new_ids.size()) / double(std::max<size_t>(result->target_passes, 1))},
          {"peak_rss_bytes", PeakRssBytes()}};
      if (*speculator) {
        out["timings"]["draft_tokens"] = result->draft_tokens;
        out["timings"]["draft_accepted"] = result->draft_accepted;
        out["timings"]["acceptance_rate"] =
            result->draft_tokens > 0 ? double(result->draft_accepted) / double(result->draft_tokens)
                                     : 0.0;
        out["timings"]["draft_lengths"] = (*speculator)->draft_lengths();
      }
      std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::fputs(color ? "\033[0m\n" : "\n", stdout);
      std::fflush(stdout);
      std::fprintf(
          stderr,
          "prompt: %zu tokens, %.1f tokens/s; generation: %zu tokens, %.1f tokens/s%s; stop: %s\n",
          result->prompt_tokens, prompt_tps, result->new_ids.size(), gen_tps,
          SpeculationSummary(*result).c_str(), result->stop_reason.c_str());
    }
    // After the text and its newline, so that a terminal shows them apart.
    PETREL_LOG_INFO("prompt: %zu tokens in %.3f s; generation: %zu tokens in %.3f s", result->prompt_tokens,
                    result->prompt_seconds, result->new_ids.size(), result->generate_seconds);
    print_profile();
    return exit_code;
  };
}

}  // namespace petrel::tools
