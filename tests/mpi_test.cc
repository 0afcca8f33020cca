// Pipeline parallelism over MPI end to end: `mpirun -np N petrel ... --mpi` against the single
// process (logits bit for bit, greedy text, perplexity), the split's errors, each rank's memory,
// and a rank killed mid-generation. Skipped when mpirun is missing or petrel was built without
// MPI. All ranks run on this host (--oversubscribe), over shared memory.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "util/cli_runner.h"

namespace petrel::testing {
namespace {

std::string TinyQ4() { return SharedDir() + "/models/synth-tiny/tiny-v2048-q4_0.gguf"; }
const char* kIds = "1,450,1996,1558,263,931,1892,727,471,263,217,826,257,365,354,889";

bool HaveMpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

bool PetrelHasMpi() {
  const Output help = Petrel({"run", "--help"});
  return help.out.find("--mpi") != std::string::npos;
}

#define SKIP_WITHOUT_MPI()                                                       \
  do {                                                                           \
    if (!HaveMpirun())                                                           \
      GTEST_SKIP() << "mpirun is not installed (scripts/setup.sh installs "      \
                      "openmpi-bin)";                                            \
    if (!PetrelHasMpi()) GTEST_SKIP() << "petrel was built without MPI (-Dmpi)"; \
  } while (0)

// The mpirun command line for `n` ranks of petrel with `args`: one host, more ranks than cores
// allowed, shared memory between the ranks (no network), root allowed in containers.
std::vector<std::string> MpirunArgv(int n, const std::vector<std::string>& args) {
  const char* bin = std::getenv("PETREL_BIN");
  std::vector<std::string> argv = {"mpirun", "--oversubscribe", "-np", std::to_string(n), "--mca",
                                   "btl", "self,vader",
                                   // Containers often forbid cross-memory attach.
                                   "--mca", "btl_vader_single_copy_mechanism", "none"};
  if (getuid() == 0) argv.insert(argv.begin() + 1, "--allow-run-as-root");
  argv.push_back(bin ? bin : "petrel");
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

Output Mpirun(int n, const std::vector<std::string>& args) {
  const std::vector<std::string> argv = MpirunArgv(n, args);
  std::string command;
  for (const std::string& arg : argv) command += (command.empty() ? "" : " ") + Quote(arg);
  const std::string err_path = ScratchDir() + "/petrel_mpi_" + std::to_string(getpid()) + "_stderr";
  command += " 2>" + Quote(err_path) + " </dev/null";
  Output output;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return output;
  char buffer[4096];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.out.append(buffer, got);
  const int status = pclose(pipe);
  output.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  output.err.assign(std::istreambuf_iterator<char>(err), {});
  std::remove(err_path.c_str());
  return output;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string Scratch(const std::string& name) {
  return ScratchDir() + "/mpi_" + std::to_string(getpid()) + "_" + name;
}

// The logits of kIds from one process and from `ranks` ranks are the same bytes.
void ExpectSameLogits(const std::string& model, int ranks,
                      const std::vector<std::string>& extra = {}) {
  const std::string solo_path = Scratch("solo.f32"), mpi_path = Scratch("mpi.f32");
  std::vector<std::string> args = {"logits", "-m", model, "--ids", kIds, "-t", "1"};
  std::vector<std::string> solo_args = args, mpi_args = args;
  solo_args.insert(solo_args.end(), {"-o", solo_path});
  mpi_args.insert(mpi_args.end(), {"-o", mpi_path, "--mpi"});
  mpi_args.insert(mpi_args.end(), extra.begin(), extra.end());
  const Output solo = Petrel(solo_args);
  ASSERT_EQ(solo.exit_code, 0) << solo.err;
  const Output mpi = Mpirun(ranks, mpi_args);
  ASSERT_EQ(mpi.exit_code, 0) << mpi.err;
  const std::string a = ReadFile(solo_path), b = ReadFile(mpi_path);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b) << model << " with " << ranks << " ranks: the logits differ";
  std::remove(solo_path.c_str());
  std::remove(mpi_path.c_str());
}

TEST(Mpi, StoryF32LogitsAreBitIdentical) {
  SKIP_WITHOUT_MPI();
  ExpectSameLogits(StoryF32Gguf(), 2);
}

TEST(Mpi, StoryF32HasTooFewBlocksForThreeRanks) {
  SKIP_WITHOUT_MPI();
  // story has 2 blocks: a third rank would hold none.
  const Output mpi = Mpirun(3, {"logits", "-m", StoryF32Gguf(), "--ids", kIds, "-t", "1", "-o",
                                Scratch("never.f32"), "--mpi"});
  EXPECT_NE(mpi.exit_code, 0);
  EXPECT_NE(
      mpi.err.find("error: 3 ranks for a model of 2 blocks: each rank needs at least one block"),
      std::string::npos)
      << mpi.err;
}

TEST(Mpi, TinyQ4_0LogitsAreBitIdentical) {
  SKIP_WITHOUT_MPI();
  ExpectSameLogits(TinyQ4(), 2);
  ExpectSameLogits(TinyQ4(), 3);
}

TEST(Mpi, ExplicitSplitGivesTheSameLogits) {
  SKIP_WITHOUT_MPI();
  ExpectSameLogits(TinyQ4(), 2, {"--mpi-split", "1,5"});
}

TEST(Mpi, GreedyTextIsIdentical) {
  SKIP_WITHOUT_MPI();
  // story has 2 blocks, synth-tiny 6.
  for (const auto& [model, max_ranks] : {std::pair{StoryF32Gguf(), 2}, std::pair{TinyQ4(), 3}}) {
    const std::vector<std::string> args = {
        "run", "-m", model, "-p", "Once upon a time", "-n", "24", "--temp", "0", "-t", "1"};
    const Output solo = Petrel(args);
    ASSERT_EQ(solo.exit_code, 0) << solo.err;
    ASSERT_FALSE(solo.out.empty());
    for (int ranks = 2; ranks <= max_ranks; ++ranks) {
      std::vector<std::string> mpi_args = args;
      mpi_args.push_back("--mpi");
      const Output mpi = Mpirun(ranks, mpi_args);
      ASSERT_EQ(mpi.exit_code, 0) << mpi.err;
      EXPECT_EQ(mpi.out, solo.out) << model << " with " << ranks << " ranks";
    }
  }
}

TEST(Mpi, SampledTextIsIdenticalWithASeed) {
  SKIP_WITHOUT_MPI();
  const std::vector<std::string> args = {
      "run",    "-m", StoryF32Gguf(), "-p", "Once upon a time", "-n", "24", "--temp", "0.8",
      "--seed", "7",  "-t",           "1"};
  const Output solo = Petrel(args);
  ASSERT_EQ(solo.exit_code, 0) << solo.err;
  std::vector<std::string> mpi_args = args;
  mpi_args.push_back("--mpi");
  const Output mpi = Mpirun(2, mpi_args);
  ASSERT_EQ(mpi.exit_code, 0) << mpi.err;
  EXPECT_EQ(mpi.out, solo.out);
}

TEST(Mpi, PerplexityIsIdentical) {
  SKIP_WITHOUT_MPI();
  const std::string text_path = Scratch("ppl.txt");
  {
    std::ofstream text(text_path);
    for (int i = 0; i < 12; ++i) {
      text << "Once upon a time, there was a little girl named Lily. She liked to play outside "
              "with her dog and her friends in the park near her house. ";
    }
  }
  const std::vector<std::string> args = {"perplexity", "-m", StoryF32Gguf(), "-f", text_path,
                                         "-c",         "64", "-t",           "1"};
  const Output solo = Petrel(args);
  ASSERT_EQ(solo.exit_code, 0) << solo.err;
  std::vector<std::string> mpi_args = args;
  mpi_args.push_back("--mpi");
  const Output mpi = Mpirun(2, mpi_args);
  ASSERT_EQ(mpi.exit_code, 0) << mpi.err;
  // The figures are printed from the same logits; only timings may differ.
  auto figures = [](const std::string& out) {
    std::string kept;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("ms") == std::string::npos && line.find("/s") == std::string::npos)
        kept += line + "\n";
    }
    return kept;
  };
  EXPECT_FALSE(figures(solo.out).empty());
  EXPECT_EQ(figures(mpi.out), figures(solo.out));
  std::remove(text_path.c_str());
}

// A bad split is one error line from every rank, and the job ends.
void ExpectSplitError(int ranks, const std::vector<std::string>& extra, const std::string& needle) {
  std::vector<std::string> args = {"run", "-m", TinyQ4(), "-p", "Hi",
                                   "-n",  "2",  "-t",     "1",  "--mpi"};
  args.insert(args.end(), extra.begin(), extra.end());
  const Output mpi = Mpirun(ranks, args);
  EXPECT_NE(mpi.exit_code, 0) << mpi.err;
  size_t lines = 0;
  for (size_t at = mpi.err.find("error: "); at != std::string::npos;
       at = mpi.err.find("error: ", at + 1)) {
    ++lines;
    EXPECT_NE(mpi.err.find(needle, at), std::string::npos) << mpi.err;
  }
  EXPECT_GE(lines, 1u) << mpi.err;
  EXPECT_LE(lines, size_t(ranks)) << mpi.err;
}

TEST(Mpi, BadSplitsAreOneLineErrors) {
  SKIP_WITHOUT_MPI();
  ExpectSplitError(2, {"--mpi-split", "0,6"}, "every rank needs at least one block");
  ExpectSplitError(2, {"--mpi-split", "-1,7"}, "every rank needs at least one block");
  ExpectSplitError(2, {"--mpi-split", "2,1,1"}, "3 counts for 2 ranks");
  ExpectSplitError(2, {"--mpi-split", "2,3"}, "add up to 5 blocks; the model has 6");
  ExpectSplitError(2, {"--mpi-split", "two,2"}, "is not a block count");
  ExpectSplitError(7, {}, "7 ranks for a model of 6 blocks");
}

TEST(Mpi, InfoPrintsEachRanksPlan) {
  const Output info = Petrel({"info", "-m", TinyQ4(), "--mpi-ranks", "3"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("pipeline         3 ranks (split by weight bytes)"), std::string::npos)
      << info.out;
  EXPECT_NE(info.out.find("rank 0         blocks 0-"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("+ embedding: weights"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("-5 + output head: weights"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("KV cache"), std::string::npos) << info.out;
  const Output split = Petrel({"info", "-m", TinyQ4(), "--mpi-ranks", "2", "--mpi-split", "5,1"});
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_NE(split.out.find("blocks 0-4 + embedding"), std::string::npos) << split.out;
  EXPECT_NE(split.out.find("blocks 5-5 + output head"), std::string::npos) << split.out;
  ExpectOneLineError(Petrel({"info", "-m", TinyQ4(), "--mpi-ranks", "7"}),
                     "7 ranks for a model of 6 blocks");
}

// Each rank's resident memory grows by its share of the weights, not by the whole file: on a
// synthetic f32 model of 8 blocks (about 110 MB), each of 2 ranks stays within its range's
// bytes + 10 % + its KV storage + 8 MiB for activations and allocator slack, and below 3/4 of
// the file.
TEST(Mpi, EachRankHoldsOnlyItsShareOfTheWeights) {
  SKIP_WITHOUT_MPI();
  const std::string model = Scratch("synth-512x8.gguf");
  const Output synth = Petrel({"synth", "--shape", "512x8x8x8x1536", "--type", "f32", "-o", model});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  struct stat file;
  ASSERT_EQ(stat(model.c_str(), &file), 0);
  const Output mpi = Mpirun(2, {"run", "-m", model, "-p", "Hello there", "-n", "4", "--temp", "0",
                                "-t", "1", "-c", "64", "--mpi", "--mpi-report"});
  std::remove(model.c_str());
  ASSERT_EQ(mpi.exit_code, 0) << mpi.err;
  const std::regex line(
      "mpi-report: rank (\\d+) blocks (\\d+)-(\\d+) weight_bytes (\\d+) kv_bytes (\\d+) "
      "rss_before_load (\\d+) peak_rss (\\d+)");
  size_t reports = 0;
  size_t weights_total = 0;
  for (std::sregex_iterator it(mpi.err.begin(), mpi.err.end(), line), end; it != end; ++it) {
    const std::smatch& m = *it;
    ++reports;
    const double weight = std::stod(m[4]), kv = std::stod(m[5]);
    const double before = std::stod(m[6]), peak = std::stod(m[7]);
    weights_total += size_t(weight);
    const double growth = peak - before;
    const double allowed = weight * 1.10 + kv + 8.0 * 1024 * 1024;
    EXPECT_LE(growth, allowed) << "rank " << m[1] << ": grew " << growth / 1048576 << " MiB for "
                               << weight / 1048576 << " MiB of weights\n"
                               << mpi.err;
    EXPECT_LT(growth, 0.75 * double(file.st_size)) << mpi.err;
    std::printf("rank %s: blocks %s-%s, weights %.1f MiB, KV %.2f MiB, resident %.1f -> %.1f MiB\n",
                m[1].str().c_str(), m[2].str().c_str(), m[3].str().c_str(), weight / 1048576,
                kv / 1048576, before / 1048576, peak / 1048576);
  }
  EXPECT_EQ(reports, 2u) << mpi.err;
  EXPECT_GT(weights_total, size_t(0.9 * double(file.st_size)));
}

// A rank whose part does not fit its memory fails with one line naming it, and the other rank
// ends too (no hang): rank 1 runs under an address-space limit of 3 GB (a smaller host) and
// would hold 5 blocks of a 1M-token f32 KV cache (768 MiB each).
TEST(Mpi, RankThatDoesNotFitFailsNamingItself) {
  SKIP_WITHOUT_MPI();
  const std::vector<std::string> args = {
      "run", "-m", TinyQ4(),  "-p",           "Hi",  "-n",    "2",           "-t",
      "1",   "-c", "1048576", "--cache-type", "f32", "--mpi", "--mpi-split", "1,5"};
  // mpirun's multiple-program form: the same petrel twice, the second behind `ulimit -v`.
  std::vector<std::string> argv = MpirunArgv(1, args);
  const char* bin = std::getenv("PETREL_BIN");
  std::string limited = std::string("ulimit -v 3000000; exec ") + Quote(bin ? bin : "petrel");
  for (const std::string& arg : args) limited += " " + Quote(arg);
  argv.insert(argv.end(), {":", "-np", "1", "sh", "-c", limited});
  std::string command;
  for (const std::string& arg : argv) command += (command.empty() ? "" : " ") + Quote(arg);
  const std::string err_path = Scratch("fit_stderr");
  const auto start = std::chrono::steady_clock::now();
  const int status =
      std::system((command + " >/dev/null 2>" + Quote(err_path) + " </dev/null").c_str());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string err = ReadFile(err_path);
  std::remove(err_path.c_str());
  EXPECT_NE(status, 0) << err;
  EXPECT_LT(seconds, 60.0);
  EXPECT_NE(err.find("error: rank 1: blocks 1-5 need "), std::string::npos) << err;
  EXPECT_NE(err.find("is available there"), std::string::npos) << err;
  EXPECT_NE(err.find("error: rank 0: another rank could not load its part"), std::string::npos)
      << err;
}

// A job started in the background, with stdout and stderr in files.
struct BackgroundJob {
  pid_t pid = -1;
  std::string out_path, err_path;
};

BackgroundJob StartMpirun(int n, const std::vector<std::string>& args) {
  BackgroundJob job;
  job.out_path = Scratch("job_stdout");
  job.err_path = Scratch("job_stderr");
  const std::vector<std::string> argv = MpirunArgv(n, args);
  job.pid = fork();
  if (job.pid == 0) {
    setpgid(0, 0);  // its own group, so that the test can end it all if it hangs
    const int out = open(job.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(job.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = open("/dev/null", O_RDONLY);
    dup2(out, 1);
    dup2(err, 2);
    dup2(in, 0);
    std::vector<char*> raw;
    for (const std::string& arg : argv) raw.push_back(const_cast<char*>(arg.c_str()));
    raw.push_back(nullptr);
    execvp(raw[0], raw.data());
    _exit(127);
  }
  return job;
}

// The petrel processes mpirun started (its children named petrel).
std::vector<pid_t> Ranks(pid_t mpirun) {
  std::vector<pid_t> ranks;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');
    if (close == std::string::npos || line.find("(petrel)") == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    int ppid;
    rest >> state >> ppid;
    if (ppid == mpirun && state != 'Z') ranks.push_back(pid_t(std::stoi(name)));
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

bool Alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// Waits up to `seconds` for `pid` to exit; its wait status, or -1 if it is still running.
int WaitFor(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

// Starts a long generation over 2 ranks and waits until rank 0 has printed text.
BackgroundJob StartLongGeneration(std::vector<pid_t>* ranks,
                                  const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"run", "-m",      TinyQ4(),       "-p",     "Once upon a time",
                                   "-n",  "1000000", "--ignore-eos", "--temp", "0",
                                   "-t",  "1",       "--mpi"};
  args.insert(args.end(), extra.begin(), extra.end());
  BackgroundJob job = StartMpirun(2, args);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    struct stat info;
    if (stat(job.out_path.c_str(), &info) == 0 && info.st_size > 64) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  *ranks = Ranks(job.pid);
  return job;
}

void EndJob(const BackgroundJob& job) {
  kill(-job.pid, SIGKILL);
  waitpid(job.pid, nullptr, 0);
  std::remove(job.out_path.c_str());
  std::remove(job.err_path.c_str());
}

TEST(Mpi, KilledRankEndsEveryRankWithinTenSeconds) {
  SKIP_WITHOUT_MPI();
  std::vector<pid_t> ranks;
  const BackgroundJob job = StartLongGeneration(&ranks, {});
  ASSERT_EQ(ranks.size(), 2u) << ReadFile(job.err_path);
  ASSERT_GT(ReadFile(job.out_path).size(), 64u)
      << "no text was generated: " << ReadFile(job.err_path);
  const auto killed_at = std::chrono::steady_clock::now();
  kill(ranks[1], SIGKILL);
  const int status = WaitFor(job.pid, 10.0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  const bool survivor = Alive(ranks[0]);
  const std::string err = ReadFile(job.err_path);
  EndJob(job);
  ASSERT_NE(status, -1) << "the job still ran 10 s after a rank was killed: " << err;
  EXPECT_FALSE(survivor);
  EXPECT_TRUE(!WIFEXITED(status) || WEXITSTATUS(status) != 0) << err;
  EXPECT_LT(seconds, 10.0);
  std::printf("the job ended %.2f s after rank pid %d was killed\n", seconds, int(ranks[1]));
}

TEST(Mpi, StoppedRankMakesTheOthersGiveUpAfterTheTimeout) {
  SKIP_WITHOUT_MPI();
  // A rank that hangs without dying: Open MPI cannot tell, so the others' receive deadline ends
  // the job.
  std::vector<pid_t> ranks;
  const BackgroundJob job = StartLongGeneration(&ranks, {"--mpi-timeout", "2"});
  ASSERT_EQ(ranks.size(), 2u) << ReadFile(job.err_path);
  kill(ranks[1], SIGSTOP);
  const int status = WaitFor(job.pid, 15.0);
  const std::string err = ReadFile(job.err_path);
  kill(ranks[1], SIGCONT);
  EndJob(job);
  ASSERT_NE(status, -1) << "the job still ran 15 s after a rank stopped: " << err;
  EXPECT_TRUE(!WIFEXITED(status) || WEXITSTATUS(status) != 0) << err;
  // Which rank notices first depends on which one stopped and where it was.
  EXPECT_NE(err.find(" within 2 s (is every rank still running?)"), std::string::npos) << err;
}

}  // namespace
}  // namespace petrel::testing
