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

#include "util/test_data.h"

namespace petrel {
namespace {

class PtyProcess {
 public:
  explicit PtyProcess(const std::vector<std::string>& args) {
    pid_ = forkpty(&fd_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~PtyProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return pid_ > 0; }
  void Send(const std::string& text) { ASSERT_EQ(write(fd_, text.data(), text.size()), ssize_t(text.size())); }

  // Reads until `pattern` matches the output seen since the last call (or the timeout).
  bool WaitFor(const std::regex& pattern, std::vector<std::string>* groups = nullptr, int timeout_ms = 60000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      std::smatch found;
      if (std::regex_search(pending_, found, pattern)) {
        if (groups) groups->assign(found.begin(), found.end());  // copies: `pending_` changes next
        all_ += pending_.substr(0, size_t(found.position(0) + found.length(0)));
        pending_ = found.suffix().str();
        return true;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, int(left)) <= 0) continue;
      char buffer[4096];
      const ssize_t n = read(fd_, buffer, sizeof(buffer));
      if (n <= 0) return false;
      pending_.append(buffer, size_t(n));
    }
  }
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string transcript() const { return all_ + pending_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string pending_, all_;
};

std::string WriteTemplate() {
  const std::string path = testing::ScratchDir() + "/petrel_chat_pty_" + std::to_string(getpid()) + ".jinja";
  std::ofstream(path) << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant:{% endif %}";
  return path;
}

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
