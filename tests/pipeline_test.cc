// Pipeline stages without MPI: the split plan, and engines each running a range of blocks,
// linked in one process by queues, against one engine running them all (bit for bit).
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core/runtime/engine.h"
#include "core/runtime/pipeline_plan.h"
#include "util/test_data.h"

namespace petrel {
namespace {

TEST(PipelinePlan, ParsesCountsAndRejectsBadOnes) {
  auto counts = ParseLayerCounts("3,2,2");
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts, (std::vector<size_t>{3, 2, 2}));
  for (const char* bad : {"", "3,,2", "0,2", "-1,3", "2,x", "2.5,1"}) {
    EXPECT_FALSE(ParseLayerCounts(bad).ok()) << bad;
  }
  EXPECT_FALSE(SplitLayersByCounts({3, 3}, 7, 2).ok());  // sum differs
  EXPECT_FALSE(SplitLayersByCounts({3, 4}, 7, 3).ok());  // count differs
  auto ranges = SplitLayersByCounts({3, 4}, 7, 2);
  ASSERT_TRUE(ranges.ok());
  EXPECT_EQ((*ranges)[0].begin, 0);
  EXPECT_EQ((*ranges)[0].end, 3);
  EXPECT_EQ((*ranges)[1].begin, 3);
  EXPECT_EQ((*ranges)[1].end, 7);
}

TEST(PipelinePlan, SplitsByBytesMinimisingTheLargestRank) {
  auto even = SplitLayersByBytes({10, 10, 10, 10}, 0, 0, 2);
  ASSERT_TRUE(even.ok());
  EXPECT_EQ((*even)[0].end, 2);
  // A heavy head moves blocks to the first rank.
  auto head = SplitLayersByBytes({10, 10, 10, 10}, 0, 25, 2);
  ASSERT_TRUE(head.ok());
  EXPECT_EQ((*head)[0].end, 3);
  // One heavy block gets a rank of its own.
  auto heavy = SplitLayersByBytes({1, 1, 50, 1, 1}, 0, 0, 3);
  ASSERT_TRUE(heavy.ok());
  EXPECT_EQ((*heavy)[1].begin, 2);
  EXPECT_EQ((*heavy)[1].end, 3);
  EXPECT_EQ((*heavy)[2].end, 5);
  auto too_many = SplitLayersByBytes({1, 1}, 0, 0, 3);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("3 ranks for a model of 2 blocks"), std::string::npos);
}

// Stages in one process: rank r's rows go through a queue to rank r + 1; the last rank's output
// is copied to every rank.
template <typename T>
struct Channel {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::vector<T>> items;
  void Put(std::vector<T> item) {
    std::lock_guard<std::mutex> lock(mutex);
    items.push_back(std::move(item));
    ready.notify_all();
  }
  std::vector<T> Take() {
    std::unique_lock<std::mutex> lock(mutex);
    ready.wait(lock, [&] { return !items.empty(); });
    std::vector<T> item = std::move(items.front());
    items.pop_front();
    return item;
  }
};

struct Loopback {
  explicit Loopback(int n) : rows(size_t(n)), outputs(size_t(n)), calls(size_t(n)) {}
  std::vector<Channel<float>> rows;     // [r]: into rank r
  std::vector<Channel<float>> outputs;  // [r]: the last rank's output, to rank r
  std::vector<Channel<uint8_t>> calls;  // [r]: rank 0's engine calls, to rank r
};

class LoopbackLink final : public PipelineLink {
 public:
  LoopbackLink(Loopback* loop, int rank, int n) : loop_(loop), rank_(rank), n_(n) {}
  int rank() const override { return rank_; }
  int n_ranks() const override { return n_; }
  Result<LayerRange> ChooseLayers(const LoadedModel& model) override {
    PETREL_ASSIGN_OR_RETURN(auto stages, PlanStages(model, size_t(n_), {}));
    return stages[size_t(rank_)];
  }
  Status SendRows(const float* rows, size_t n) override {
    loop_->rows[size_t(rank_ + 1)].Put(std::vector<float>(rows, rows + n));
    return Status::Ok();
  }
  Status ReceiveRows(float* rows, size_t n) override {
    std::vector<float> item = loop_->rows[size_t(rank_)].Take();
    if (item.size() != n) return Error("rows: %zu floats, expected %zu", item.size(), n);
    std::copy(item.begin(), item.end(), rows);
    return Status::Ok();
  }
  Status ShareOutput(float* out, size_t n) override {
    if (rank_ == n_ - 1) {
      for (int r = 0; r + 1 < n_; ++r)
        loop_->outputs[size_t(r)].Put(std::vector<float>(out, out + n));
      return Status::Ok();
    }
    std::vector<float> item = loop_->outputs[size_t(rank_)].Take();
    if (item.size() != n) return Error("output: %zu floats, expected %zu", item.size(), n);
    std::copy(item.begin(), item.end(), out);
    return Status::Ok();
  }
  Status SendCalls(const std::vector<uint8_t>& calls) override {
    for (int r = 1; r < n_; ++r) loop_->calls[size_t(r)].Put(calls);
    return Status::Ok();
  }
  Status ReceiveCalls(std::vector<uint8_t>* calls) override {
    *calls = loop_->calls[size_t(rank_)].Take();
    return Status::Ok();
  }
  Status SendOutputToFirst(const float* out, size_t n) override {
    loop_->outputs[0].Put(std::vector<float>(out, out + n));
    return Status::Ok();
  }
  Status PostOutputReceive(float* out, size_t n) override {
    posted_.emplace_back(out, n);
    return Status::Ok();
  }
  Status WaitOutputs() override {
    for (auto [out, n] : posted_) {
      std::vector<float> item = loop_->outputs[0].Take();
      if (item.size() != n) return Error("output: %zu floats, expected %zu", item.size(), n);
      std::copy(item.begin(), item.end(), out);
    }
    posted_.clear();
    return Status::Ok();
  }
  bool failed() const override { return false; }

 private:
  Loopback* loop_;
  int rank_, n_;
  std::vector<std::pair<float*, size_t>> posted_;
};

std::string TinyQ4() { return testing::SharedDir() + "/models/synth-tiny/tiny-v2048-q4_0.gguf"; }

EngineOptions Options() {
  EngineOptions options;
  options.n_threads = 1;
  options.context = 64;
  options.load_tokenizer = false;
  return options;
}

// Prefill then two decode steps: every position's logits of the prefill, then each step's.
std::vector<float> Drive(Engine& engine) {
  const std::vector<int32_t> ids = {1, 450, 1996, 1558, 263, 931, 29, 727, 471, 263, 17, 76};
  std::vector<float> all, logits;
  const SeqId seq = engine.NewSequence();
  {
    Status s = engine.Prefill(seq, ids, /*all_logits=*/true, &logits);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  all = logits;
  for (int32_t next : {5, 9}) {
    EXPECT_TRUE(engine.Prefill(seq, {next}, false, &logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

void ExpectStagesMatchOneEngine(const std::string& model, int n_stages) {
  auto solo = Engine::Load(model, Options());
  ASSERT_TRUE(solo.ok()) << solo.status().message();
  const std::vector<float> want = Drive(**solo);
  const size_t n_layers = size_t((*solo)->config().n_layers);
  const size_t kv_all = (*solo)->kv_bytes();

  Loopback loop(n_stages);
  std::vector<std::vector<float>> got(static_cast<size_t>(n_stages));
  std::vector<LayerRange> ranges(static_cast<size_t>(n_stages));
  std::vector<size_t> kv(static_cast<size_t>(n_stages));
  std::vector<std::thread> threads;
  for (int r = 0; r < n_stages; ++r) {
    threads.emplace_back([&, r] {
      EngineOptions options = Options();
      options.pipeline = std::make_shared<LoopbackLink>(&loop, r, n_stages);
      auto engine = Engine::Load(model, options);
      ASSERT_TRUE(engine.ok()) << engine.status().message();
      ranges[size_t(r)] = (*engine)->stage_layers();
      kv[size_t(r)] = (*engine)->kv_bytes();
      got[size_t(r)] = Drive(**engine);
    });
  }
  for (std::thread& thread : threads) thread.join();
  int next = 0;
  for (int r = 0; r < n_stages; ++r) {
    EXPECT_EQ(ranges[size_t(r)].begin, next);
    EXPECT_GT(ranges[size_t(r)].size(), 0);
    next = ranges[size_t(r)].end;
    // Each stage holds the K/V storage of its own blocks only.
    EXPECT_EQ(kv[size_t(r)], kv_all / n_layers * size_t(ranges[size_t(r)].size()));
    ASSERT_EQ(got[size_t(r)].size(), want.size());
    EXPECT_EQ(0, std::memcmp(got[size_t(r)].data(), want.data(), want.size() * sizeof(float)))
        << "stage " << r << " of " << n_stages;
  }
  EXPECT_EQ(size_t(next), n_layers);
}

TEST(PipelineStages, TwoStagesGiveTheSameLogits) { ExpectStagesMatchOneEngine(TinyQ4(), 2); }
TEST(PipelineStages, ThreeStagesGiveTheSameLogits) { ExpectStagesMatchOneEngine(TinyQ4(), 3); }
TEST(PipelineStages, StoryF32GivesTheSameLogits) {
  ExpectStagesMatchOneEngine(testing::SharedDir() + "/models/story-gguf/story-f32.gguf", 2);
}

// A server's kind of calls: several prompts in one step (cut into passes), the prefix cache, a
// fork, a free, then decode steps of several sequences. Returns every logit rank 0 got.
std::vector<float> DriveLikeAServer(Engine& engine) {
  std::vector<float> all;
  std::vector<std::vector<int32_t>> prompts;
  for (int p = 0; p < 3; ++p) {
    std::vector<int32_t> prompt;
    for (int t = 0; t < 20 + 3 * p; ++t) prompt.push_back(int32_t(1 + (t * 37 + p * 101) % 2000));
    prompts.push_back(prompt);
  }
  std::vector<SeqId> seqs;
  std::vector<StepInput> inputs;
  std::vector<StepOutput> outputs;
  for (const auto& prompt : prompts) {
    seqs.push_back(engine.NewSequence());
    inputs.push_back(StepInput{seqs.back(), prompt, true});
  }
  auto step = [&] {
    EXPECT_TRUE(engine.Step(inputs, &outputs).ok());
    for (const StepOutput& output : outputs) {
      EXPECT_TRUE(output.status.ok()) << output.status.message();
      all.insert(all.end(), output.logits.begin(), output.logits.end());
    }
  };
  step();
  for (size_t i = 0; i < seqs.size(); ++i) engine.CacheSequenceBlocks(seqs[i], prompts[i]);
  std::vector<int32_t> longer = prompts[0];
  longer.push_back(7);
  size_t reused = 0;
  const SeqId cached = engine.NewSequenceFromCache(longer, &reused);
  EXPECT_EQ(reused, 16u);
  auto forked = engine.ForkSequence(seqs[1]);
  EXPECT_TRUE(forked.ok());
  engine.FreeSequence(seqs[2]);
  const std::vector<int32_t> rest(longer.begin() + 16, longer.end());
  const std::vector<int32_t> next = {5}, other = {9};
  inputs = {StepInput{seqs[0], next, true}, StepInput{*forked, other, true},
            StepInput{cached, rest, true}, StepInput{seqs[1], next, true}};
  step();
  inputs.resize(2);
  step();
  return all;
}

EngineOptions ServerOptions() {
  EngineOptions options = Options();
  options.max_sequences = 6;
  return options;
}

TEST(PipelineStages, FirstStageLeadsAndOthersReplayItsCalls) {
  auto solo = Engine::Load(TinyQ4(), ServerOptions());
  ASSERT_TRUE(solo.ok()) << solo.status().message();
  const std::vector<float> want = DriveLikeAServer(**solo);
  const int n_stages = 3;
  Loopback loop(n_stages);
  std::vector<float> got;
  std::vector<size_t> free_blocks(n_stages), cached_blocks(n_stages);
  std::vector<std::thread> threads;
  for (int r = 0; r < n_stages; ++r) {
    threads.emplace_back([&, r] {
      EngineOptions options = ServerOptions();
      options.pipeline = std::make_shared<LoopbackLink>(&loop, r, n_stages);
      options.pipeline_calls = EngineOptions::PipelineCalls::kFirstStageLeads;
      auto engine = Engine::Load(TinyQ4(), options);
      ASSERT_TRUE(engine.ok()) << engine.status().message();
      if (r == 0) {
        got = DriveLikeAServer(**engine);
        EXPECT_TRUE((*engine)->StopFollowers().ok());
      } else {
        const Status followed = (*engine)->FollowFirstStage();
        EXPECT_TRUE(followed.ok()) << followed.message();
      }
      free_blocks[size_t(r)] = (*engine)->kv_free_blocks();
      cached_blocks[size_t(r)] = (*engine)->kv_cached_blocks();
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
  for (int r = 1; r < n_stages; ++r) {
    EXPECT_EQ(free_blocks[size_t(r)], free_blocks[0]) << "rank " << r;
    EXPECT_EQ(cached_blocks[size_t(r)], cached_blocks[0]) << "rank " << r;
  }
  EXPECT_GT(cached_blocks[0], 0u);
}

TEST(PipelineStages, TooManyStagesIsAnError) {
  EngineOptions options = Options();
  Loopback loop(7);
  options.pipeline = std::make_shared<LoopbackLink>(&loop, 0, 7);
  auto engine = Engine::Load(TinyQ4(), options);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("7 ranks for a model of 6 blocks"), std::string::npos);
}

}  // namespace
}  // namespace petrel
