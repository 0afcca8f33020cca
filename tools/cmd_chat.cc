// `petrel chat`: an interactive multi-turn chat in the terminal. The KV cache is kept across
// turns: each turn renders the whole conversation, reuses the cached prefix it shares with what
// the model has already seen, and processes only the rest. When the context fills, the oldest
// turns are dropped. Ctrl-C stops a reply, not the program.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/chat/chat_prompt.h"
#include "core/generation/sequence.h"
#include "core/generation/session_file.h"
#include "core/tokenizer/tokenizer.h"
#include "tools/cli_ux.h"
#include "tools/common.h"
#include "tools/draft_options.h"
#include "tools/sampling_options.h"

namespace petrel::tools {
namespace {

volatile std::sig_atomic_t g_chat_interrupted = 0;
void OnChatInterrupt(int) { g_chat_interrupted = 1; }

void InstallChatInterruptHandler() {
  struct sigaction action = {};
  action.sa_handler = OnChatInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a Ctrl-C at the prompt must not end the input stream
  sigaction(SIGINT, &action, nullptr);
}

const char* kHelp =
    "commands: /reset  /system TEXT  /save FILE  /load FILE  /help  /exit   (Ctrl-C stops a reply)\n";

class ChatSession {
 public:
  ChatSession(Engine& engine, const ChatPrompt& prompt, GenerateOptions options,
              Speculator* speculator)
      : engine_(engine),
        speculator_(speculator),
        prompt_(prompt),
        options_(std::move(options)),
        seq_(engine.NewSequence()),
        end_text_(engine.tokenizer(), !options_.skip_special) {}

  void SetSystem(const std::string& text) {
    system_ = text;
    Reset();
  }
  void Reset() {
    messages_ = nlohmann::ordered_json::array();
    if (!system_.empty()) messages_.push_back({{"role", "system"}, {"content", system_}});
  }

  Status Turn(const std::string& user_text) {
    nlohmann::ordered_json messages = messages_;
    messages.push_back({{"role", "user"}, {"content", user_text}});
    PETREL_ASSIGN_OR_RETURN(std::vector<int32_t> ids, prompt_.Tokenize(*engine_.tokenizer(), messages, true));
    // A turn's prompt leaves room for the reply (-n tokens, at most half the context): the
    // oldest whole turns go until it does, the system prompt stays. A longer reply shifts the
    // context (GenerateOptions::context_shift), keeping the system prompt.
    const size_t context = engine_.context();
    const size_t room = std::min(options_.max_new_tokens, context / 2);
    size_t dropped = 0;
    while (ids.size() + room > context && DropOldestTurn(messages)) {
      ++dropped;
      PETREL_ASSIGN_OR_RETURN(ids, prompt_.Tokenize(*engine_.tokenizer(), messages, true));
    }
    if (ids.size() >= context) {
      return Error("the message does not fit the context: its prompt has %zu tokens, the context "
                   "holds %zu", ids.size(), context);
    }
    if (dropped == 1) std::fputs("chat: context full, dropped the oldest turn\n", stderr);
    if (dropped > 1) std::fprintf(stderr, "chat: context full, dropped the %zu oldest turns\n", dropped);
    GenerateOptions options = options_;
    options.context_shift = true;
    PETREL_ASSIGN_OR_RETURN(options.keep, SystemPrefix(ids));
    // Reuse the longest prefix the cache already holds; keep one token to feed so there are
    // logits to sample from.
    size_t common = 0;
    while (common < cached_.size() && common < ids.size() && cached_[common] == ids[common]) ++common;
    if (common == ids.size()) --common;
    PETREL_RETURN_IF_ERROR(engine_.TruncateSequence(seq_, common));
    cached_.resize(common);
    const std::vector<int32_t> fresh(ids.begin() + long(common), ids.end());
    g_chat_interrupted = 0;
    std::string reply;
    auto emit = [&](const std::string& text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      reply.append(text);
    };
    PETREL_ASSIGN_OR_RETURN(
        std::unique_ptr<Sequence> sequence,
        Sequence::Create(engine_, seq_, fresh, options,
                         [&](const GeneratedToken&, std::string_view text) {
                           emit(end_text_.Push(text));
                           return g_chat_interrupted == 0;
                         },
                         cached_));
    RunSpeculative(engine_, *sequence, speculator_);
    emit(end_text_.Flush());
    // The cache holds the prompt and every generated token but the last (never fed back), less
    // what context shifts dropped; after a failure, what it held before the failed step.
    cached_ = sequence->held();
    if (!sequence->status().ok()) return sequence->status();
    const GenerateResult& result = sequence->result();
    std::fputs("\n", stdout);
    std::fflush(stdout);
    messages_ = std::move(messages);
    messages_.push_back({{"role", "assistant"}, {"content", reply}});
    std::fprintf(stderr,
                 "[prompt: %zu new tokens, %zu reused from the cache; reply: %zu tokens, %.1f "
                 "tokens/s%s; stop: %s]\n",
                 fresh.size(), common, result.new_ids.size(),
                 result.new_ids.size() / std::max(result.generate_seconds, 1e-9),
                 SpeculationSummary(result).c_str(), result.stop_reason.c_str());
    return Status::Ok();
  }

  Status Save(const std::string& path) {
    nlohmann::ordered_json metadata = {{"system", system_}, {"messages", messages_}};
    return SaveSession(engine_, seq_, cached_, metadata.dump(), path);
  }

  Status Load(const std::string& path) {
    PETREL_ASSIGN_OR_RETURN(LoadedSession session, LoadSession(engine_, seq_, path));
    auto metadata = nlohmann::ordered_json::parse(session.metadata, nullptr, false);
    if (!metadata.is_object() || !metadata["messages"].is_array() || !metadata["system"].is_string()) {
      (void)engine_.TruncateSequence(seq_, 0);
      cached_.clear();
      return Error("%s: session metadata is not a chat", path.c_str());
    }
    cached_ = std::move(session.tokens);
    system_ = metadata["system"].get<std::string>();
    messages_ = metadata["messages"];
    return Status::Ok();
  }

  size_t turns() const { return messages_.size(); }

 private:
  // Removes the oldest turn, a user message and what follows it up to the next one, from
  // `messages`; the system prompt stays. False when there is none but the last user message.
  static bool DropOldestTurn(nlohmann::ordered_json& messages) {
    size_t first = 0;
    while (first < messages.size() && messages[first].value("role", "") == "system") ++first;
    size_t end = first + 1;
    while (end < messages.size() && messages[end].value("role", "") != "user") ++end;
    if (end >= messages.size()) return false;
    messages.erase(messages.begin() + long(first), messages.begin() + long(end));
    return true;
  }

  // The tokens a context shift keeps: those `ids` shares with the system prompt rendered alone
  // (or the BOS token without one).
  Result<size_t> SystemPrefix(const std::vector<int32_t>& ids) const {
    const Tokenizer& tokenizer = *engine_.tokenizer();
    if (system_.empty()) return size_t(!ids.empty() && ids[0] == tokenizer.bos_id() ? 1 : 0);
    const nlohmann::ordered_json system = nlohmann::ordered_json::array({{{"role", "system"}, {"content", system_}}});
    PETREL_ASSIGN_OR_RETURN(std::vector<int32_t> alone, prompt_.Tokenize(tokenizer, system, false));
    size_t common = 0;
    while (common < alone.size() && common < ids.size() && alone[common] == ids[common]) ++common;
    // A shift needs room for at least two tokens past the kept ones.
    return std::min(common, engine_.context() > 2 ? engine_.context() - 2 : 0);
  }

  Engine& engine_;
  Speculator* speculator_;  // null: plain decoding
  const ChatPrompt& prompt_;
  GenerateOptions options_;
  SeqId seq_;
  std::string system_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  std::vector<int32_t> cached_;  // the tokens whose K/V the cache holds, in order
  EndTextFilter end_text_;       // keeps end-of-generation markers out of replies
};

}  // namespace

Runner AddChatCommand(CLI::App& app) {
  struct Args {
    ModelOptions model;
    SamplingOptions sampling;
    DraftOptions draft;
    std::string system;
    std::string template_file;
    bool escape = false;
    bool special = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("chat", "chat with a model in the terminal");
  args->model.AddTo(*cmd);
  args->sampling.AddTo(*cmd);
  args->draft.AddTo(*cmd);
  cmd->add_option("--system", args->system, "system prompt");
  cmd->add_flag("-e,--escape", args->escape, "process escapes (\\n \\t \\\\ \\xHH ...) in --system and --stop (default off)");
  cmd->add_flag("--special", args->special,
                "print special tokens, end-of-generation ones included (default: left out)");
  cmd->add_option("--chat-template-file", args->template_file, "use this Jinja template instead of the model's")
      ->check(CLI::ExistingFile);
  return [args]() -> int {
    if (args->sampling.generate.sampling.n_probs > 0) {
      return Fail(Error("--n-probs has no effect in chat (use run --json)"));
    }
    if (Status status = args->sampling.Check(); !status.ok()) return Fail(status);
    if (Status status = args->draft.Check(); !status.ok()) return Fail(status);
    if (Status status = args->model.Check(); !status.ok()) return Fail(status);
    auto options = args->sampling.ToGenerateOptions();
    if (!options.ok()) return Fail(options.status());
    options->skip_special = !args->special;
    std::string system = args->system;
    if (args->escape) {
      system = ProcessEscapes(system);
      for (std::string& stop : options->stop) stop = ProcessEscapes(stop);
    }
    Result<ChatPrompt> prompt = args->template_file.empty() ? ChatPrompt::Load(args->model.model_path)
                                                            : ChatPrompt::LoadFile(args->template_file);
    if (!prompt.ok()) return Fail(prompt.status());
    ModelOptions model = args->model;
    auto engine = model.LoadEngine();
    if (!engine.ok()) return Fail(engine.status());
    if (!(*engine)->tokenizer()) return Fail(Error("the model has no tokenizer"));
    if (args->sampling.n_predict < 0) options->max_new_tokens = (*engine)->context();
    auto speculator =
        args->draft.MakeSpeculator(**engine, model, options->sampling, options->ignore_eos);
    if (!speculator.ok()) return Fail(speculator.status());
    InstallChatInterruptHandler();
    ChatSession session(**engine, *prompt, *options, speculator->get());
    session.SetSystem(system);
    std::fputs(kHelp, stderr);
    std::string line;
    for (;;) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
      if (!std::getline(std::cin, line)) break;
      if (line.empty()) continue;
      Status status;
      if (line == "/exit" || line == "/quit") break;
      if (line == "/help") {
        std::fputs(kHelp, stderr);
      } else if (line == "/reset") {
        session.Reset();
        std::fputs("[conversation reset]\n", stderr);
      } else if (line.rfind("/system ", 0) == 0) {
        session.SetSystem(line.substr(8));
        std::fputs("[system prompt set; conversation reset]\n", stderr);
      } else if (line.rfind("/save ", 0) == 0) {
        status = session.Save(line.substr(6));
        if (status.ok()) std::fprintf(stderr, "[saved to %s]\n", line.substr(6).c_str());
      } else if (line.rfind("/load ", 0) == 0) {
        status = session.Load(line.substr(6));
        if (status.ok()) std::fprintf(stderr, "[loaded %s: %zu messages]\n", line.substr(6).c_str(), session.turns());
      } else if (line[0] == '/') {
        status = Error("unknown command '%s'", line.c_str());
      } else {
        status = session.Turn(line);
      }
      if (!status.ok()) std::fprintf(stderr, "error: %s\n", status.message().c_str());
    }
    std::fputs("\n", stdout);
    return 0;
  };
}

}  // namespace petrel::tools
