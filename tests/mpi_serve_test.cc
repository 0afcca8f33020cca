// `mpirun -np 2 petrel serve --mpi` end to end: rank 0 serves and schedules, rank 1 replays its
// engine calls. Eight concurrent greedy clients get the text each gets alone from a
// single-process server, and a rank killed while requests run makes every client get 503 (or
// an error event) and every process exit within 10 s. Skipped when mpirun is missing or petrel
// was built without MPI.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "util/cli_runner.h"
#include "util/server_process.h"

namespace petrel::testing {
namespace {

using json = nlohmann::json;

std::string TinyQ4() { return SharedDir() + "/models/synth-tiny/tiny-v2048-q4_0.gguf"; }

bool HaveMpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }
bool PetrelHasMpi() { return Petrel({"serve", "--help"}).out.find("--mpi") != std::string::npos; }

#define SKIP_WITHOUT_MPI()                                                       \
  do {                                                                           \
    if (!HaveMpirun())                                                           \
      GTEST_SKIP() << "mpirun is not installed (scripts/setup.sh installs "      \
                      "openmpi-bin)";                                            \
    if (!PetrelHasMpi()) GTEST_SKIP() << "petrel was built without MPI (-Dmpi)"; \
  } while (0)

// mpirun for `n` ranks on this host, over shared memory (as tests/mpi_test.cc).
std::vector<std::string> Mpirun(int n) {
  std::vector<std::string> argv = {"mpirun",
                                   "--oversubscribe",
                                   "-np",
                                   std::to_string(n),
                                   "--mca",
                                   "btl",
                                   "self,vader",
                                   "--mca",
                                   "btl_vader_single_copy_mechanism",
                                   "none"};
  if (getuid() == 0) argv.insert(argv.begin() + 1, "--allow-run-as-root");
  return argv;
}

const std::vector<std::string> kOpenings = {"Once upon a time", "Tom had a ball", "The sun",
                                            "Lily and Ben",     "A big dog",      "One day, a bird",
                                            "Sue liked cake",   "The little car"};

json Body(size_t i, int max_tokens) {
  return json{
      {"prompt", kOpenings[i % kOpenings.size()]}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

struct Reply {
  int status = -1;  // -1: no HTTP reply
  std::string text;
  bool error_event = false;  // a streamed `data: {"error": …}` event came
  size_t chunks = 0;
};

Reply Complete(httplib::Client& client, json body, bool stream,
               std::atomic<size_t>* chunks_seen = nullptr) {
  Reply reply;
  if (!stream) {
    auto res = client.Post("/v1/completions", body.dump(), "application/json");
    if (!res) return reply;
    reply.status = res->status;
    const json parsed = json::parse(res->body, nullptr, false);
    if (res->status == 200) reply.text = parsed["choices"][0]["text"];
    return reply;
  }
  body["stream"] = true;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    buffer.append(data, size);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      const json chunk = json::parse(event.substr(6), nullptr, false);
      if (chunk.contains("error")) reply.error_event = true;
      for (const json& choice : chunk.value("choices", json::array())) {
        if (choice.contains("text")) reply.text += choice["text"].get<std::string>();
      }
      ++reply.chunks;
      if (chunks_seen) ++*chunks_seen;
    }
    return true;
  };
  auto res = client.send(req);
  if (res) reply.status = res->status;
  return reply;
}

TEST(MpiServe, ConcurrentGreedyClientsGetTheirSoloText) {
  SKIP_WITHOUT_MPI();
  constexpr size_t kClients = 8;
  std::vector<std::string> alone(kClients);
  {
    ServerProcess solo({"-m", TinyQ4(), "-t", "1", "--parallel", "1", "--no-access-log"});
    ASSERT_TRUE(solo.ok()) << solo.log();
    httplib::Client client = solo.Client();
    for (size_t i = 0; i < kClients; ++i) {
      const Reply reply = Complete(client, Body(i, 24), false);
      ASSERT_EQ(reply.status, 200);
      alone[i] = reply.text;
    }
  }
  ServerProcess mpi({"-m", TinyQ4(), "-t", "1", "--parallel", "8", "--no-access-log", "--mpi"},
                    true, Mpirun(2));
  ASSERT_TRUE(mpi.ok()) << mpi.log();
  std::vector<Reply> together(kClients);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      httplib::Client own = mpi.Client();
      together[i] = Complete(own, Body(i, 24), /*stream=*/i % 2 == 0);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t i = 0; i < kClients; ++i) {
    EXPECT_EQ(together[i].status, 200) << i;
    EXPECT_FALSE(alone[i].empty()) << i;
    EXPECT_EQ(together[i].text, alone[i]) << "client " << i << (i % 2 == 0 ? " (streamed)" : "");
  }
  // A second round reuses the first's cached prefixes on both ranks.
  httplib::Client client = mpi.Client();
  const Reply again = Complete(client, Body(3, 24), false);
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(again.text, alone[3]);
  EXPECT_NE(mpi.log().find("petrel serve: ready"), std::string::npos) << mpi.log();
}

// The petrel process of rank `rank` among mpirun's children (by its OMPI_COMM_WORLD_RANK).
pid_t RankPid(pid_t mpirun, int rank) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line) || line.find("(petrel)") == std::string::npos) continue;
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    char state;
    int ppid;
    rest >> state >> ppid;
    if (ppid != mpirun) continue;
    std::ifstream environ(entry.path() / "environ");
    const std::string env(std::istreambuf_iterator<char>(environ), {});
    if (env.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos) {
      return pid_t(std::stoi(name));
    }
  }
  return -1;
}

// Whether `pid` runs (a zombie, once its parent mpirun is gone, does not).
bool Alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

TEST(MpiServe, KilledRankGivesClients503AndEndsEveryProcess) {
  SKIP_WITHOUT_MPI();
  // Steps slowed down, so that the requests are still running when the rank dies.
  setenv("PETREL_SERVE_TEST_STEP_DELAY_MS", "40", 1);
  ServerProcess mpi({"-m", TinyQ4(), "-t", "1", "--parallel", "4", "--no-access-log", "--mpi"},
                    true, Mpirun(2));
  unsetenv("PETREL_SERVE_TEST_STEP_DELAY_MS");
  ASSERT_TRUE(mpi.ok()) << mpi.log();
  const pid_t rank0 = RankPid(mpi.pid(), 0), rank1 = RankPid(mpi.pid(), 1);
  ASSERT_GT(rank0, 0);
  ASSERT_GT(rank1, 0);
  constexpr size_t kClients = 4;
  std::vector<Reply> replies(kClients);
  std::atomic<size_t> chunks{0};
  std::vector<std::thread> threads;
  for (size_t i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      httplib::Client own = mpi.Client();
      replies[i] = Complete(own, Body(i, 200), /*stream=*/i % 2 == 0, &chunks);
    });
  }
  // Both streams have tokens: every request is running.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (chunks < 6 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(chunks.load(), 6u) << mpi.log();
  const pid_t mpirun = mpi.pid();
  const auto killed_at = std::chrono::steady_clock::now();
  kill(rank1, SIGKILL);
  int status = 0;
  bool ended = false;
  bool rank0_alive = true;
  while ((!ended || rank0_alive) &&
         std::chrono::steady_clock::now() < killed_at + std::chrono::seconds(10)) {
    if (!ended) ended = mpi.Ended(&status);
    rank0_alive = Alive(rank0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  const std::string log = mpi.log();
  if (!ended) kill(-mpirun, SIGKILL);
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(ended) << "mpirun still ran 10 s after rank 1 was killed: " << log;
  EXPECT_TRUE(!WIFEXITED(status) || WEXITSTATUS(status) != 0) << log;
  EXPECT_FALSE(rank0_alive) << "rank 0 still ran 10 s after rank 1 was killed";
  for (size_t i = 0; i < kClients; ++i) {
    if (i % 2 == 0) {
      EXPECT_TRUE(replies[i].error_event || replies[i].status == 503)
          << "stream " << i << ": status " << replies[i].status << ", " << replies[i].chunks
          << " events, no error event; " << log;
    } else {
      EXPECT_EQ(replies[i].status, 503) << "client " << i << ": " << log;
    }
  }
  std::printf("every process ended %.2f s after rank 1 was killed\n", seconds);
}

TEST(MpiServe, StoppedRankEndsTheServerAfterTheTimeout) {
  SKIP_WITHOUT_MPI();
  // A rank that hangs without dying: rank 0's wait for it ends at --mpi-timeout, and rank 0 then
  // answers as when a rank dies.
  setenv("PETREL_SERVE_TEST_STEP_DELAY_MS", "40", 1);
  ServerProcess mpi({"-m", TinyQ4(), "-t", "1", "--parallel", "2", "--no-access-log", "--mpi",
                     "--mpi-timeout", "2"},
                    true, Mpirun(2));
  unsetenv("PETREL_SERVE_TEST_STEP_DELAY_MS");
  ASSERT_TRUE(mpi.ok()) << mpi.log();
  const pid_t rank1 = RankPid(mpi.pid(), 1);
  ASSERT_GT(rank1, 0);
  std::vector<Reply> replies(2);
  std::atomic<size_t> chunks{0};
  std::vector<std::thread> threads;
  for (size_t i = 0; i < replies.size(); ++i) {
    threads.emplace_back([&, i] {
      httplib::Client own = mpi.Client();
      replies[i] = Complete(own, Body(i, 200), /*stream=*/i == 0, &chunks);
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (chunks < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(chunks.load(), 3u) << mpi.log();
  kill(rank1, SIGSTOP);
  const pid_t mpirun = mpi.pid();
  int status = 0;
  bool ended = false;
  const auto stopped_at = std::chrono::steady_clock::now();
  while (!ended && std::chrono::steady_clock::now() < stopped_at + std::chrono::seconds(15)) {
    ended = mpi.Ended(&status);
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string log = mpi.log();
  kill(rank1, SIGCONT);
  if (!ended) kill(-mpirun, SIGKILL);
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(ended) << "mpirun still ran 15 s after rank 1 stopped: " << log;
  EXPECT_TRUE(!WIFEXITED(status) || WEXITSTATUS(status) != 0) << log;
  EXPECT_TRUE(replies[0].error_event || replies[0].status == 503) << log;
  EXPECT_EQ(replies[1].status, 503) << log;
  EXPECT_NE(log.find("within 2 s (is every rank still running?)"), std::string::npos) << log;
}

}  // namespace
}  // namespace petrel::testing
