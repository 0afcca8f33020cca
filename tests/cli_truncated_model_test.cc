// A model file that shrinks while `petrel run` has it mapped: the next read of a weight past the
// new end faults (SIGBUS), which petrel must report as one "error: …" line naming the file,
// with exit status 1, rather than dying of the signal.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "util/cli_runner.h"

namespace petrel::testing {
namespace {

TEST(CliTruncatedModelTest, ModelTruncatedWhileRunningIsOneErrorLine) {
  const std::string model = ScratchDir() + "/truncated_" + std::to_string(getpid()) + ".gguf";
  const std::string err_path = model + ".stderr";
  std::filesystem::copy_file(StoryF32Gguf(), model,
                             std::filesystem::copy_options::overwrite_existing);
  // Generates without end (context shift on, EOS ignored) until the file is cut under it.
  const char* bin = std::getenv("PETREL_BIN");
  const std::string command = Quote(bin ? bin : "petrel") + " run -m " + Quote(model) +
                              " -c 128 -n 1000000 --ignore-eos --temp 0 -p 'Once upon a time'"
                              " 2>" +
                              Quote(err_path) + " </dev/null";
  std::FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::array<char, 256> buffer;
  std::string out;
  // Some text first: the model is loaded and generating.
  while (out.size() < 64) {
    const size_t n = std::fread(buffer.data(), 1, 1, pipe);
    if (n == 0) break;
    out.append(buffer.data(), n);
  }
  ASSERT_GE(out.size(), 64u) << "petrel stopped before generating";
  std::filesystem::resize_file(model, 4096);  // the header stays; every weight is cut off
  while (std::fread(buffer.data(), 1, buffer.size(), pipe) > 0) {
  }
  const int status = pclose(pipe);
  std::ifstream err_file(err_path);
  const std::string err(std::istreambuf_iterator<char>(err_file), {});
  std::filesystem::remove(model);
  std::filesystem::remove(err_path);
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status) << "; stderr: " << err;
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  EXPECT_EQ(err.rfind("error: " + model + ": the file shrank to 4096 bytes while mapped", 0), 0u)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

}  // namespace
}  // namespace petrel::testing
