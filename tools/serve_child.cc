// ServeChild: fork + exec of /proc/self/exe, the "listening on" line, /health, /proc/PID/status.
#include "tools/serve_child.h"

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <thread>

namespace petrel::tools {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

ServeChild::~ServeChild() {
  if (pid_ > 0) Stop(std::chrono::seconds(10));
  if (!log_path_.empty()) std::remove(log_path_.c_str());
}

Status ServeChild::Start(const std::vector<std::string>& args, std::chrono::seconds timeout) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/petrel-bench-serve-XXXXXX";
  const int log_fd = mkstemp(pattern.data());
  if (log_fd < 0) return Error("cannot create the server's log file %s", pattern.c_str());
  log_path_ = pattern;
  std::vector<std::string> argv = {"/proc/self/exe", "serve", "--host", "127.0.0.1", "--port", "0"};
  argv.insert(argv.end(), args.begin(), args.end());
  // Everything the child needs is prepared before fork(): after it, in a process with threads,
  // the child may only make async-signal-safe calls.
  std::vector<char*> raw;
  for (std::string& arg : argv) raw.push_back(arg.data());
  raw.push_back(nullptr);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  pid_ = fork();
  if (pid_ < 0) {
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return Error("cannot start petrel serve (fork failed)");
  }
  if (pid_ == 0) {
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(raw[0], raw.data());
    _exit(127);
  }
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::regex listening("listening on http://[0-9.]+:([0-9]+)");
  while (std::chrono::steady_clock::now() < deadline) {
    if (port_ == 0) {
      std::smatch match;
      const std::string log = ReadFile(log_path_);
      if (std::regex_search(log, match, listening)) port_ = std::stoi(match[1]);
    }
    if (port_ != 0) {
      httplib::Client client("127.0.0.1", port_);
      auto res = client.Get("/health");
      if (res && res->status == 200) return Status::Ok();
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Error("petrel serve exited before it was ready:\n%s", LogTail(5).c_str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Stop(std::chrono::seconds(5));
  return Error("petrel serve was not ready after %lld s:\n%s", (long long)timeout.count(),
               LogTail(5).c_str());
}

double ServeChild::StatusFieldMib(const char* field) const {
  if (pid_ <= 0) return -1.0;
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  const std::string prefix = std::string(field) + ":";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::istringstream fields(line.substr(prefix.size()));
    double kib = -1.0;
    fields >> kib;
    return kib < 0 ? -1.0 : kib / 1024.0;
  }
  return -1.0;
}

double ServeChild::RssMib() const { return StatusFieldMib("VmRSS"); }
double ServeChild::PeakRssMib() const { return StatusFieldMib("VmHWM"); }

int ServeChild::Stop(std::chrono::seconds timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
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

std::string ServeChild::LogTail(size_t lines) const {
  std::istringstream log(ReadFile(log_path_));
  std::vector<std::string> all;
  for (std::string line; std::getline(log, line);) all.push_back(line);
  std::string tail;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    tail += (tail.empty() ? "" : "\n") + all[i];
  }
  return tail;
}

}  // namespace petrel::tools
