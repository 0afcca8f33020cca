// `petrel serve` as a child process for tests: started on a free loopback port (--port 0, read
// back from its "listening on" line), ready once /health answers 200, stopped with SIGTERM.
#pragma once

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "util/test_data.h"

namespace petrel::testing {

class ServerProcess {
 public:
  // Starts `petrel serve --port 0 ARGS...`; ok() says whether it became ready in time. With
  // `wait_ready` false it returns as soon as the port is known (port() 0 if it never was).
  // `launcher`: a command that runs petrel (mpirun and its arguments), looked up in PATH; the
  // child then leads a process group of its own, so that the test can end all of it.
  explicit ServerProcess(const std::vector<std::string>& args, bool wait_ready = true,
                         const std::vector<std::string>& launcher = {}) {
    log_path_ = ScratchDir() + "/petrel_serve_" + std::to_string(getpid()) + "_" +
                std::to_string(counter_++) + ".log";
    const char* bin = std::getenv("PETREL_BIN");
    std::vector<std::string> argv = launcher;
    const bool grouped = !launcher.empty();
    for (std::string arg : {std::string(bin ? bin : "petrel"), std::string("serve"),
                            std::string("--port"), std::string("0")}) {
      argv.push_back(arg);
    }
    argv.insert(argv.end(), args.begin(), args.end());
    // Everything the child needs is prepared before fork(): after it, in a process with
    // threads, the child may only make async-signal-safe calls.
    std::vector<char*> raw;
    for (std::string& arg : argv) raw.push_back(arg.data());
    raw.push_back(nullptr);
    const int log_fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(log_fd, STDERR_FILENO);
      dup2(log_fd, STDOUT_FILENO);
      if (grouped) {
        setpgid(0, 0);
        execvp(raw[0], raw.data());
      }
      execv(raw[0], raw.data());
      _exit(127);
    }
    close(log_fd);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    const std::regex listening("listening on http://[0-9.]+:([0-9]+)");
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch match;
      const std::string text = log();
      if (port_ == 0 && std::regex_search(text, match, listening)) port_ = std::stoi(match[1]);
      if (port_ != 0 && !wait_ready) return;
      if (port_ != 0) {
        httplib::Client client("127.0.0.1", port_);
        auto res = client.Get("/health");
        if (res && res->status == 200) {
          ready_ = true;
          return;
        }
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~ServerProcess() {
    if (pid_ > 0) Stop();
    std::remove(log_path_.c_str());
  }

  bool ok() const { return ready_; }
  pid_t pid() const { return pid_; }  // -1 once it has exited
  int port() const { return port_; }
  std::string log() const {
    std::ifstream in(log_path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  httplib::Client Client() const {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(120, 0);
    return client;
  }
  // SIGTERM, then the exit status (-1 when it did not exit normally within 30 s).
  int Stop() {
    Signal(SIGTERM);
    return WaitExit();
  }
  void Signal(int signal) {
    if (pid_ > 0) kill(pid_, signal);
  }
  // Whether it has ended (its wait status in `status`), without waiting.
  bool Ended(int* status) {
    if (pid_ <= 0) return true;
    if (waitpid(pid_, status, WNOHANG) != pid_) return false;
    pid_ = -1;
    return true;
  }
  // The exit status once it ends (-1 when it did not exit normally; killed after 30 s).
  int WaitExit() {
    if (pid_ <= 0) return -1;
    int status = 0;
    for (int i = 0; i < 3000; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return -1;
  }

 private:
  static inline int counter_ = 0;
  std::string log_path_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool ready_ = false;
};

}  // namespace petrel::testing
