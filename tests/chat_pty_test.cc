// `petrel chat` driven through a pseudo-terminal as a user would: two turns (the second reuses
// the cached prefix and processes only the new tokens), Ctrl-C during a reply, save and load.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>

#include "util/pty_process.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::PtyProcess;
std::string WriteTemplate() { return testing::WriteChatTemplate("chat_pty"); }


TEST(ChatPty, SecondTurnProcessesOnlyNewTokensAndCtrlCStopsAReply) {
  const char* bin = std::getenv("PETREL_BIN");
  ASSERT_NE(bin, nullptr);
  const std::string chat_template = WriteTemplate();
  const std::string session = testing::ScratchDir() + "/petrel_chat_pty_" + std::to_string(getpid()) + ".session";
  PtyProcess chat({bin, "chat", "-m", testing::SharedDir() + "/models/story-gguf/story-f32.gguf",
                   "--chat-template-file", chat_template, "-n", "16", "--temp", "0", "-t", "2", "-c", "4096"});
  ASSERT_TRUE(chat.ok());
  const std::regex prompt_marker("> ");
  const std::regex stats(R"(\[prompt: (\d+) new tokens, (\d+) reused from the cache; reply: (\d+) tokens[^\]]*stop: (\w+)\])");
  ASSERT_TRUE(chat.WaitFor(prompt_marker)) << chat.transcript();

  std::vector<std::string> first, second;
  chat.Send("Once upon a time\n");
  ASSERT_TRUE(chat.WaitFor(stats, &first)) << chat.transcript();
  chat.Send("The dog ran to the park\n");
  ASSERT_TRUE(chat.WaitFor(stats, &second)) << chat.transcript();
  const size_t first_new = std::stoul(first[1]), second_new = std::stoul(second[1]);
  const size_t second_reused = std::stoul(second[2]);
  std::printf("turn 1: %zu tokens processed; turn 2: %zu processed, %zu reused from the cache\n",
              first_new, second_new, second_reused);
  EXPECT_EQ(std::stoul(first[2]), 0u);
  // Turn 2's prompt holds all of turn 1 (prompt + reply) plus the new user line; only the part
  // after the cached prefix is processed.
  EXPECT_GE(second_reused, first_new);
  EXPECT_LT(second_new, 20u);

  chat.Send("/save " + session + "\n");
  ASSERT_TRUE(chat.WaitFor(std::regex(R"(\[saved to )"))) << chat.transcript();
  chat.Send("/reset\n");
  chat.Send("/load " + session + "\n");
  ASSERT_TRUE(chat.WaitFor(std::regex(R"(\[loaded .*: 4 messages\])"))) << chat.transcript();
  std::vector<std::string> third;
  chat.Send("The end\n");
  ASSERT_TRUE(chat.WaitFor(stats, &third)) << chat.transcript();
  EXPECT_GT(std::stoul(third[2]), second_reused) << "the loaded session's cache is reused";

  // A long reply, interrupted: the program must survive and answer the next turn.
  chat.Send("/system You are a storyteller who never stops.\n");
  ASSERT_TRUE(chat.WaitFor(std::regex(R"(\[system prompt set)"))) << chat.transcript();
  chat.Send("/bogus\n");
  ASSERT_TRUE(chat.WaitFor(std::regex("error: unknown command"))) << chat.transcript();
  PtyProcess long_chat({bin, "chat", "-m", testing::SharedDir() + "/models/story-gguf/story-f32.gguf",
                        "--chat-template-file", chat_template, "-n", "4000", "--ignore-eos", "--temp", "0.8",
                        "-t", "1", "-c", "4096"});
  ASSERT_TRUE(long_chat.WaitFor(prompt_marker)) << long_chat.transcript();
  long_chat.Send("Tell me a very long story\n");
  // Past the terminal's echo of the line, wait for the reply to be under way.
  ASSERT_TRUE(long_chat.WaitFor(std::regex("long story\r?\n"))) << long_chat.transcript();
  ASSERT_TRUE(long_chat.WaitFor(std::regex("[a-z]+ [a-z]+ [a-z]+ "))) << long_chat.transcript();
  long_chat.Send("\x03");
  std::vector<std::string> cancelled;
  ASSERT_TRUE(long_chat.WaitFor(stats, &cancelled)) << long_chat.transcript();
  EXPECT_EQ(cancelled[4], "cancelled");
  EXPECT_LT(std::stoul(cancelled[3]), 4000u);
  long_chat.Send("Hello again\n");
  ASSERT_TRUE(long_chat.WaitFor(std::regex(R"(\[prompt: \d+ new tokens)"), nullptr, 120000)) << long_chat.transcript();
  long_chat.Send("\x03");
  long_chat.Send("/exit\n");
  chat.Send("/exit\n");
  EXPECT_EQ(chat.Wait(), 0);
  std::remove(chat_template.c_str());
  std::remove(session.c_str());
}

}  // namespace
}  // namespace petrel

namespace petrel {
namespace {

// `run -v` on a terminal: the text ends with its newline before the timing log line, so that
// the two never share a line.
TEST(ChatPtyTest, VerboseRunTimingIsOnItsOwnLine) {
  const std::string bin = std::getenv("PETREL_BIN");
  testing::PtyProcess run({bin, "run", "-v", "-m", testing::SharedDir() + "/models/story-gguf/story-f32.gguf",
                           "-p", "Once", "-n", "6", "--temp", "0"});
  ASSERT_TRUE(run.ok());
  std::vector<std::string> groups;
  ASSERT_TRUE(run.WaitFor(std::regex("([^\\n]*)prompt: [0-9]+ tokens in"), &groups));
  // Nothing precedes it on its line: no generated text.
  EXPECT_TRUE(groups[1].empty() || groups[1] == "\r")
      << "[" << groups[1] << "]";
}

}  // namespace
}  // namespace petrel
