// `petrel serve` started by `petrel bench-serve -m MODEL`: this same executable on a free
// loopback port, its stderr in a scratch file, ready once /health answers 200; its resident
// memory read from /proc while it serves; stopped with SIGTERM.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace petrel::tools {

class ServeChild {
 public:
  ServeChild() = default;
  ~ServeChild();
  ServeChild(const ServeChild&) = delete;
  ServeChild& operator=(const ServeChild&) = delete;

  // Runs `petrel serve --host 127.0.0.1 --port 0 ARGS...` and waits until it is ready, at most
  // `timeout`. The error says why it is not, with the end of its log.
  Status Start(const std::vector<std::string>& args, std::chrono::seconds timeout);
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return pid_; }
  // VmRSS and VmHWM (the peak) of /proc/PID/status in MiB; -1 when unreadable.
  double RssMib() const;
  double PeakRssMib() const;
  // SIGTERM and the wait for its exit; its exit status (-1 when killed after `timeout`).
  int Stop(std::chrono::seconds timeout);
  // The last `lines` lines of its stderr.
  std::string LogTail(size_t lines) const;

 private:
  double StatusFieldMib(const char* field) const;

  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

}  // namespace petrel::tools
