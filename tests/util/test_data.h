// Where tests find ../shared (models/, golden/) and where they may write scratch files.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace petrel::testing {

// The read-only test data folder (PETREL_SHARED_DIR, set by meson; default ../shared).
inline std::string SharedDir() {
  const char* dir = std::getenv("PETREL_SHARED_DIR");
  return dir ? dir : "../shared";
}

// A writable folder for files a test generates (never inside SharedDir()). Meson points
// TEST_TMPDIR into the build folder, so two builds testing at once do not share files.
inline std::string ScratchDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  if (!dir) dir = std::getenv("TMPDIR");
  const std::string path = dir ? dir : "/tmp";
  std::error_code ignored;
  std::filesystem::create_directories(path, ignored);
  return path;
}

}  // namespace petrel::testing
