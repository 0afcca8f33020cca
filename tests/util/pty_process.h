// Driving `petrel` through a pseudo-terminal from tests: a child on a pty, text sent as typed,
// output matched against patterns, and a chat template file for the chat suites.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "util/test_data.h"

namespace petrel::testing {

// A child process on a pseudo-terminal, killed when this goes out of scope.
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
  void Send(const std::string& text) {
    ASSERT_EQ(write(fd_, text.data(), text.size()), ssize_t(text.size()));
  }
  // Reads until `pattern` matches the output seen since the last match (or the timeout).
  bool WaitFor(const std::regex& pattern, std::vector<std::string>* groups = nullptr,
               int timeout_ms = 60000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      std::smatch found;
      if (std::regex_search(pending_, found, pattern)) {
        if (groups) groups->assign(found.begin(), found.end());
        all_ += pending_.substr(0, size_t(found.position(0) + found.length(0)));
        pending_ = found.suffix().str();
        return true;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now()).count();
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

// A plain chat template written to a scratch file (`name` keeps suites apart); returns its path.
inline std::string WriteChatTemplate(const std::string& name) {
  const std::string path = ScratchDir() + "/petrel_" + name + "_" + std::to_string(getpid()) + ".jinja";
  std::ofstream(path) << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant:{% endif %}";
  return path;
}

}  // namespace petrel::testing
