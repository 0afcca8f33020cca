// Where tests find ../shared (models/, golden/) and where they may write scratch files.
#pragma once

#include <cstdlib>
#include <string>

namespace petrel::testing {

// The read-only test data folder (PETREL_SHARED_DIR, set by meson; default ../shared).
inline std::string SharedDir() {
  const char* dir = std::getenv("PETREL_SHARED_DIR");
  return dir ? dir : "../shared";
}

// A writable folder for files a test generates (never inside SharedDir()).
inline std::string ScratchDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  if (!dir) dir = std::getenv("TMPDIR");
  return dir ? dir : "/tmp";
}

}  // namespace petrel::testing
