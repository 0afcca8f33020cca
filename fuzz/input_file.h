// A fuzz input as a file: the format readers take paths (they map the file), so each input is
// written to an anonymous in-memory file (memfd) and opened through /proc/self/fd.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/base/status.h"

namespace petrel::fuzz {

// What a target returns for an input its reader refused; with PETREL_FUZZ_VERBOSE set, the
// reason is printed too, to check that the seeds get past the reader.
inline int Refused(const Status& status) {
  if (std::getenv("PETREL_FUZZ_VERBOSE"))
    std::fprintf(stderr, "refused: %s\n", status.message().c_str());
  return 0;
}

class InputFile {
 public:
  InputFile(const uint8_t* data, size_t size) {
    fd_ = ::memfd_create("petrel-fuzz-input", MFD_CLOEXEC);
    if (fd_ < 0) return;
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) break;
      done += size_t(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~InputFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  bool ok() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace petrel::fuzz
