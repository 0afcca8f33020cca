// Running the `petrel` command from tests: PETREL_BIN (set by meson) with arguments, its exit
// status, stdout and stderr, and the check that an error is one "error: …" line.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "util/test_data.h"

namespace petrel::testing {

struct Output {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string Quote(const std::string& arg) {
  std::string quoted = "'";
  for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Runs petrel with `args`; `stdin_text` (if any) is its standard input.
inline Output Petrel(const std::vector<std::string>& args, const std::string& stdin_text = "") {
  const char* bin = std::getenv("PETREL_BIN");
  std::string command = Quote(bin ? bin : "petrel");
  for (const std::string& arg : args) command += " " + Quote(arg);
  const std::string stem = ScratchDir() + "/petrel_cli_" + std::to_string(getpid());
  const std::string err_path = stem + "_stderr";
  command += " 2>" + Quote(err_path);
  const std::string in_path = stem + "_stdin";
  {
    std::ofstream in(in_path, std::ios::binary);
    in << stdin_text;
  }
  command += " <" + Quote(in_path);
  Output output;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  output.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  output.err.assign(std::istreambuf_iterator<char>(err), {});
  std::remove(err_path.c_str());
  std::remove(in_path.c_str());
  return output;
}

inline std::string StoryHf() { return SharedDir() + "/models/story"; }
inline std::string StoryF32Gguf() { return SharedDir() + "/models/story-gguf/story-f32.gguf"; }
inline std::string StoryQ8Gguf() { return SharedDir() + "/models/story-gguf/story-q8_0.gguf"; }

// Exit status 1 and exactly one stderr line starting "error: " and containing `needle`.
inline void ExpectOneLineError(const Output& output, const std::string& needle) {
  EXPECT_EQ(output.exit_code, 1) << output.err;
  EXPECT_EQ(output.err.rfind("error: ", 0), 0u) << output.err;
  EXPECT_EQ(std::count(output.err.begin(), output.err.end(), '\n'), 1) << output.err;
  EXPECT_NE(output.err.find(needle), std::string::npos) << output.err;
}

}  // namespace petrel::testing
