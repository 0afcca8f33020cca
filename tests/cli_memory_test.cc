// `petrel` and memory: the KV cache and activations checked against the memory available before
// they are allocated.
#include <string>
#include <vector>

#include "util/cli_runner.h"

namespace petrel::testing {
namespace {

// Runs petrel under an address-space limit of `limit_kb` (ulimit -v), which the memory check
// counts as what is available; stderr is appended to stdout's file through the runner.
Output PetrelLimited(size_t limit_kb, const std::vector<std::string>& args) {
  const char* bin = std::getenv("PETREL_BIN");
  std::string inner = "ulimit -v " + std::to_string(limit_kb) + "; exec " + Quote(bin ? bin : "petrel");
  for (const std::string& arg : args) inner += " " + Quote(arg);
  const std::string err_path = ScratchDir() + "/petrel_mem_" + std::to_string(getpid()) + "_stderr";
  const std::string command = "sh -c " + Quote(inner) + " 2>" + Quote(err_path) + " </dev/null";
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
  return output;
}

const std::vector<std::string> kGreedy = {"-p", "Once upon a time", "-n", "8", "--temp", "0"};

std::vector<std::string> RunArgs(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"run", "-m", StoryHf()};
  args.insert(args.end(), kGreedy.begin(), kGreedy.end());
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(CliMemory, KvCacheLargerThanAvailableMemoryIsOneError) {
  // 2^20 tokens of an f32 cache over 2 layers of 64-wide K and V rows: 1 GiB, in under 1 GB.
  const Output output = PetrelLimited(1000000, RunArgs({"-c", "1048576", "--cache-type", "f32"}));
  ExpectOneLineError(output, "the KV cache for 1048576 tokens x 1 sequences (1.0 GiB, F32)");
  EXPECT_NE(output.err.find("of available memory; lower -c"), std::string::npos) << output.err;
  EXPECT_TRUE(output.out.empty());
}

TEST(CliMemory, ActivationsLargerThanAvailableMemoryIsOneError) {
  const Output output = PetrelLimited(
      150000, RunArgs({"-c", "64", "-b", "65536", "--ubatch-size", "65536"}));
  ExpectOneLineError(output, "the activations for passes of 65536 tokens");
  EXPECT_NE(output.err.find("lower --ubatch-size"), std::string::npos) << output.err;
}

TEST(CliMemory, PlanThatFitsRunsUnderTheSameLimit) {
  const Output unlimited = Petrel(RunArgs({}));
  ASSERT_EQ(unlimited.exit_code, 0) << unlimited.err;
  const Output limited = PetrelLimited(1000000, RunArgs({}));
  ASSERT_EQ(limited.exit_code, 0) << limited.err;
  EXPECT_EQ(limited.out, unlimited.out);
}

// Either nothing on stderr but the summary line, or also the one warning of a refused lock.
void ExpectAtMostLockWarning(const Output& output) {
  size_t warnings = 0;
  for (size_t at = output.err.find("warning: "); at != std::string::npos;
       at = output.err.find("warning: ", at + 1)) {
    ++warnings;
  }
  EXPECT_LE(warnings, 1u) << output.err;
  if (warnings == 1) {
    EXPECT_NE(output.err.find("warning: cannot lock "), std::string::npos) << output.err;
    EXPECT_NE(output.err.find("(ulimit -l)"), std::string::npos) << output.err;
  }
  EXPECT_EQ(output.err.find("error"), std::string::npos) << output.err;
  EXPECT_EQ(output.err.find("loading "), std::string::npos) << output.err;  // not a terminal
}

TEST(CliMemory, NoMmapAndMlockGiveTheSameGreedyOutput) {
  for (const std::string& model : {StoryHf(), StoryQ8Gguf()}) {
    std::vector<std::string> base = {"run", "-m", model};
    base.insert(base.end(), kGreedy.begin(), kGreedy.end());
    const Output mapped = Petrel(base);
    ASSERT_EQ(mapped.exit_code, 0) << mapped.err;
    for (const std::vector<std::string>& extra :
         std::vector<std::vector<std::string>>{{"--no-mmap"}, {"--mlock"}, {"--no-mmap", "--mlock"}}) {
      std::vector<std::string> args = base;
      args.insert(args.end(), extra.begin(), extra.end());
      const Output output = Petrel(args);
      ASSERT_EQ(output.exit_code, 0) << output.err;
      EXPECT_EQ(output.out, mapped.out) << model << " " << extra[0];
      ExpectAtMostLockWarning(output);
    }
  }
}

TEST(CliMemory, MlockRefusedIsOneWarning) {
  // A lock limit of 0 KiB makes every lock fail: one warning, and the run goes on.
  std::vector<std::string> args = {"run", "-m", StoryQ8Gguf(), "--mlock"};
  args.insert(args.end(), kGreedy.begin(), kGreedy.end());
  const Output unlimited = Petrel({"run", "-m", StoryQ8Gguf(), "-p", "Once upon a time", "-n", "8",
                                   "--temp", "0"});
  const char* bin = std::getenv("PETREL_BIN");
  std::string inner = "ulimit -l 0; exec " + Quote(bin ? bin : "petrel");
  for (const std::string& arg : args) inner += " " + Quote(arg);
  // Root locks past the limit unless it gives up CAP_IPC_LOCK, which setpriv(1) can do.
  const bool drop_cap = getuid() == 0 && std::system("command -v setpriv >/dev/null 2>&1") == 0;
  const std::string prefix = drop_cap ? "setpriv --bounding-set -ipc_lock --inh-caps -ipc_lock " : "";
  const std::string err_path = ScratchDir() + "/petrel_mlock_" + std::to_string(getpid());
  std::FILE* pipe = popen(
      (prefix + "sh -c " + Quote(inner) + " 2>" + Quote(err_path) + " </dev/null").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  Output output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  output.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  output.err.assign(std::istreambuf_iterator<char>(err), {});
  std::remove(err_path.c_str());
  ASSERT_EQ(output.exit_code, 0) << output.err;
  EXPECT_EQ(output.out, unlimited.out);
  if (getuid() != 0 || drop_cap) {
    EXPECT_NE(output.err.find("warning: cannot lock "), std::string::npos) << output.err;
  }
  ExpectAtMostLockWarning(output);
}

// Runs `petrel args` with stderr (and stdout) on a terminal, through script(1); "" without it.
std::string OnTerminal(const std::vector<std::string>& args) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) return "";
  const char* bin = std::getenv("PETREL_BIN");
  std::string inner = Quote(bin ? bin : "petrel");
  for (const std::string& arg : args) inner += " " + Quote(arg);
  std::FILE* pipe = popen(("script -qec " + Quote(inner) + " /dev/null </dev/null").c_str(), "r");
  if (!pipe) return "";
  std::string out;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  pclose(pipe);
  return out;
}

TEST(CliMemory, LoadProgressOnlyOnATerminal) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1)";
  // Over the 100 MiB from which reading in shows progress.
  const std::string model = ScratchDir() + "/petrel_mem_big_" + std::to_string(getpid()) + ".gguf";
  const Output synth = Petrel({"synth", "--shape", "512x2x8x8x1408", "--type", "f32", "-o", model});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  const std::vector<std::string> run = {"run", "-m", model, "-p", "ab", "-n", "2", "--temp", "0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = run;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  EXPECT_NE(OnTerminal(with({"--no-mmap"})).find("% (144 / 150 MiB)"), std::string::npos);
  EXPECT_NE(OnTerminal(with({"--mlock"})).find("loading "), std::string::npos);
  EXPECT_EQ(OnTerminal(with({"--no-mmap", "--no-progress"})).find("loading "), std::string::npos);
  EXPECT_EQ(OnTerminal(run).find("loading "), std::string::npos);  // mapped: nothing read in
  const Output piped = Petrel(with({"--no-mmap"}));
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.err.find("loading "), std::string::npos) << piped.err;
  std::remove(model.c_str());
}

TEST(CliColor, ColorIntoAPipeHasNoEscapeCodes) {
  const Output plain = Petrel(RunArgs({}));
  const Output color = Petrel(RunArgs({"--color"}));
  ASSERT_EQ(color.exit_code, 0) << color.err;
  EXPECT_EQ(color.out, plain.out);
  EXPECT_EQ(color.out.find('\033'), std::string::npos);
  EXPECT_EQ(color.err.find('\033'), std::string::npos);
}

}  // namespace
}  // namespace petrel::testing
