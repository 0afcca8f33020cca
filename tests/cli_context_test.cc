// A full context from the command line: `petrel run` shifts it (--keep, --no-context-shift) and
// `petrel chat`, driven through a pseudo-terminal, drops its oldest turns and goes on answering.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "util/cli_runner.h"
#include "util/pty_process.h"

namespace petrel {
namespace {

using testing::ExpectOneLineError;
using testing::Petrel;
using testing::StoryF32Gguf;

// `petrel run --json` with `extra` flags after a greedy 200-token request at a 64-token context.
nlohmann::json RunJson(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"run", "-m", StoryF32Gguf(), "-c", "64", "-n", "200",
                                   "--ignore-eos", "--temp", "0", "-t", "2", "--json",
                                   "-p", "Once upon a time there was a little girl named Lily who"};
  args.insert(args.end(), extra.begin(), extra.end());
  const testing::Output output = Petrel(args);
  EXPECT_EQ(output.exit_code, 0) << output.err;
  auto parsed = nlohmann::json::parse(output.out, nullptr, false);
  EXPECT_TRUE(parsed.is_object()) << output.out;
  return parsed.is_object() ? parsed : nlohmann::json::object();
}

std::vector<int32_t> Ids(const nlohmann::json& value) {
  return value.is_array() ? value.get<std::vector<int32_t>>() : std::vector<int32_t>();
}

TEST(RunContext, AFullContextShiftsAndGenerationGoesOnUnlessTurnedOff) {
  const nlohmann::json stopped = RunJson({"--no-context-shift"});
  const nlohmann::json shifted = RunJson({});
  const nlohmann::json kept = RunJson({"--keep", "8"});
  const std::vector<int32_t> prompt = Ids(stopped["prompt_ids"]);
  ASSERT_GT(prompt.size(), 9u);
  ASSERT_LT(prompt.size(), 20u);

  // Without the shift the generation stops where the context is full: the last sampled token
  // is never fed, so 64 - prompt + 1 of them.
  EXPECT_EQ(stopped["stop_reason"], "context");
  const std::vector<int32_t> before_shift = Ids(stopped["new_ids"]);
  EXPECT_EQ(before_shift.size(), 64 - prompt.size() + 1);
  EXPECT_EQ(stopped["timings"]["context_shifts"], 0);

  for (const nlohmann::json* run : {&shifted, &kept}) {
    SCOPED_TRACE(run == &kept ? "--keep 8" : "--keep 0");
    EXPECT_EQ((*run)["stop_reason"], "length");
    const std::vector<int32_t> ids = Ids((*run)["new_ids"]);
    ASSERT_EQ(ids.size(), 200u);
    EXPECT_EQ((*run)["timings"]["generated_tokens"], 200);
    EXPECT_GE((*run)["timings"]["context_shifts"].get<int>(), 4);
    EXPECT_EQ(Ids((*run)["prompt_ids"]), prompt);
    // Up to the first shift the generation is the one that stopped there.
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + long(before_shift.size())),
              before_shift);
  }
  // What the shift keeps changes what comes after it: with --keep 8 the first 9 prompt tokens
  // (BOS and 8) stay in the context, without it only the BOS.
  EXPECT_NE(Ids(shifted["new_ids"]), Ids(kept["new_ids"]));
  // A --keep past the prompt keeps all of it: the same as keeping exactly the prompt.
  const nlohmann::json whole = RunJson({"--keep", "64"});
  const nlohmann::json exact = RunJson({"--keep", std::to_string(prompt.size() - 1)});
  EXPECT_EQ(whole["stop_reason"], "length");
  EXPECT_EQ(Ids(whole["new_ids"]), Ids(exact["new_ids"]));
}

TEST(RunContext, KeepOutsideTheContextIsRefused) {
  const std::vector<std::string> base = {"run", "-m", StoryF32Gguf(), "-c", "64", "-n", "4",
                                         "-p", "Once upon a time"};
  for (const char* keep : {"65", "-1"}) {
    SCOPED_TRACE(keep);
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--keep", keep});
    ExpectOneLineError(Petrel(args), std::string("--keep ") + keep +
                                         " is out of range (0..64, the context)");
  }
}

// A child process on a pseudo-terminal, read as a user would see it.
using testing::PtyProcess;
std::string WriteTemplate() { return testing::WriteChatTemplate("cli_context"); }


std::string Repeat(const std::string& text, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += text;
  return out;
}

const std::regex kStats(
    R"(\[prompt: (\d+) new tokens, (\d+) reused from the cache; reply: (\d+) tokens[^\]]*stop: (\w+)\])");

TEST(ChatContext, TurnsPastTheContextDropTheOldestAndAreAnswered) {
  const char* bin = std::getenv("PETREL_BIN");
  ASSERT_NE(bin, nullptr);
  const std::string chat_template = WriteTemplate();
  PtyProcess chat({bin, "chat", "-m", StoryF32Gguf(), "--chat-template-file", chat_template,
                   "--system", "You tell stories.", "-n", "16", "--temp", "0", "-t", "2", "-c",
                   "128"});
  ASSERT_TRUE(chat.ok());
  ASSERT_TRUE(chat.WaitFor(std::regex("> "))) << chat.transcript();
  // Each turn takes about 30 tokens of the 128 (16 of them left for the reply): by the fourth
  // the oldest turn has to go.
  std::vector<std::string> stats;
  const std::regex dropped_one("chat: context full, dropped the oldest turn\r?\n");
  for (const char* line : {"Once upon a time", "The dog ran", "The cat sat"}) {
    chat.Send(std::string(line) + "\n");
    ASSERT_TRUE(chat.WaitFor(kStats, &stats)) << chat.transcript();
    EXPECT_EQ(stats[3], "16");
  }
  EXPECT_EQ(chat.transcript().find("dropped"), std::string::npos) << chat.transcript();
  chat.Send("Tom went home\n");
  ASSERT_TRUE(chat.WaitFor(dropped_one)) << chat.transcript();
  ASSERT_TRUE(chat.WaitFor(kStats, &stats)) << chat.transcript();
  EXPECT_EQ(stats[3], "16");
  EXPECT_EQ(stats[4], "length");
  // A long message (about 60 tokens) needs the room of two turns.
  chat.Send(Repeat("the dog ran to the park and ", 8) + "\n");
  ASSERT_TRUE(chat.WaitFor(std::regex("chat: context full, dropped the 2 oldest turns\r?\n")))
      << chat.transcript();
  ASSERT_TRUE(chat.WaitFor(kStats, &stats)) << chat.transcript();
  EXPECT_EQ(stats[3], "16");
  // One that does not fit even alone is refused, and the conversation stays as it was.
  chat.Send(Repeat("the dog ran to the park and ", 30) + "\n");
  ASSERT_TRUE(chat.WaitFor(std::regex(
      "error: the message does not fit the context: its prompt has \\d+ tokens, the context "
      "holds 128\r?\n")))
      << chat.transcript();
  chat.Send("Hello again\n");
  ASSERT_TRUE(chat.WaitFor(dropped_one)) << chat.transcript();
  ASSERT_TRUE(chat.WaitFor(kStats, &stats)) << chat.transcript();
  EXPECT_EQ(stats[3], "16");
  chat.Send("/exit\n");
  EXPECT_EQ(chat.Wait(), 0);

  // A reply longer than the context shifts it (keeping the system prompt) and runs to its
  // length; the next turn, which cannot hold it, drops it and is answered too.
  PtyProcess long_chat({bin, "chat", "-m", StoryF32Gguf(), "--chat-template-file",
                        chat_template, "--system", "You tell stories.", "-n", "150",
                        "--ignore-eos", "--temp", "0", "-t", "2", "-c", "64"});
  ASSERT_TRUE(long_chat.ok());
  ASSERT_TRUE(long_chat.WaitFor(std::regex("> "))) << long_chat.transcript();
  long_chat.Send("Tell me a long story\n");
  ASSERT_TRUE(long_chat.WaitFor(kStats, &stats)) << long_chat.transcript();
  EXPECT_EQ(stats[3], "150");
  EXPECT_EQ(stats[4], "length");
  long_chat.Send("And then?\n");
  ASSERT_TRUE(long_chat.WaitFor(dropped_one)) << long_chat.transcript();
  ASSERT_TRUE(long_chat.WaitFor(kStats, &stats)) << long_chat.transcript();
  EXPECT_GT(std::stoul(stats[2]), 0u) << "the system prompt is reused from the cache";
  EXPECT_EQ(stats[3], "150");
  long_chat.Send("/exit\n");
  EXPECT_EQ(long_chat.Wait(), 0);
  std::remove(chat_template.c_str());
}

}  // namespace
}  // namespace petrel
