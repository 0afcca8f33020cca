// The arithmetic of `petrel perplexity` on hand-made logits: llama-perplexity's windows, the
// log-softmax, the NLL statistics, KL divergence and its statistics, and the base file's round
// trip and refusals.
#include "core/eval/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/eval/kld_base_file.h"
#include "util/test_data.h"

namespace petrel {
namespace {

std::string ScratchPath(const std::string& name) {
  return testing::ScratchDir() + "/perplexity_test_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<float> RandomLogits(size_t n, uint32_t seed, float spread = 4.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> logits(n);
  for (float& logit : logits) logit = normal(rng);
  return logits;
}

// log softmax in long double, the slow obvious way.
long double ExactLogProb(const std::vector<float>& logits, size_t token) {
  long double sum = 0;
  for (const float logit : logits) sum += std::exp((long double)logit);
  return (long double)logits[token] - std::log(sum);
}

TEST(PlanChunks, CutsLikeLlamaPerplexity) {
  auto plan = PlanChunks(1131, 128);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->n_chunks, 8u);  // the tail of 107 tokens is dropped
  EXPECT_EQ(plan->first, 64u);
  EXPECT_EQ(plan->scored_per_chunk(), 63u);
  EXPECT_EQ(plan->scored(), 504u);
  auto odd = PlanChunks(100, 7);
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->first, 3u);
  EXPECT_EQ(odd->scored_per_chunk(), 3u);
  EXPECT_EQ(PlanChunks(128, 128)->n_chunks, 1u);
}

TEST(PlanChunks, RefusesShortWindowsAndTexts) {
  auto tiny = PlanChunks(1000, kMinPerplexityContext - 1);
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("at least 6"), std::string::npos);
  auto short_text = PlanChunks(127, 128);
  ASSERT_FALSE(short_text.ok());
  EXPECT_NE(short_text.status().message().find("fewer than one window"), std::string::npos);
}

TEST(ChunkTokens, StartsEachWindowWithBos) {
  std::vector<int32_t> text(30);
  std::iota(text.begin(), text.end(), 100);
  const ChunkPlan plan = *PlanChunks(text.size(), 10);
  const std::vector<int32_t> second = ChunkTokens(text, plan, 1, /*bos=*/1);
  ASSERT_EQ(second.size(), 10u);
  EXPECT_EQ(second[0], 1);
  EXPECT_EQ(second[1], 111);
  EXPECT_EQ(second[9], 119);
  EXPECT_EQ(ChunkTokens(text, plan, 2, -1)[0], 120);  // no BOS: the text's own token
}

TEST(LogSoftmax, MatchesExactValues) {
  const std::vector<float> logits = RandomLogits(5000, 1);
  std::vector<float> row(logits.size());
  LogSoftmax(logits, row);
  long double mass = 0;
  for (size_t i = 0; i < logits.size(); i += 97) {
    EXPECT_NEAR(LogProbOf(logits, int32_t(i)), double(ExactLogProb(logits, i)), 1e-5);
    EXPECT_NEAR(row[i], double(ExactLogProb(logits, i)), 1e-5);
  }
  for (const float log_prob : row) mass += std::exp((long double)log_prob);
  EXPECT_NEAR(double(mass), 1.0, 1e-5);
}

TEST(LogSoftmax, LargeLogitsAndUniformRows) {
  // Max subtraction: logits far beyond exp's range stay finite.
  const std::vector<float> big = {1000.0f, 1000.0f, 990.0f};
  EXPECT_NEAR(LogProbOf(big, 0), -std::log(2.0 + std::exp(-10.0)), 1e-6);
  const std::vector<float> uniform(1024, -3.5f);
  EXPECT_NEAR(LogProbOf(uniform, 17), -std::log(1024.0), 1e-6);
}

TEST(Argmax, FirstOfTies) {
  EXPECT_EQ(Argmax(std::vector<float>{1, 3, 2, 3}), 1);
  EXPECT_EQ(Argmax(std::vector<float>{-1}), 0);
}

TEST(NllStats, PerplexityAndUncertainty) {
  NllStats stats;
  EXPECT_EQ(stats.PerplexityUncertainty(), 0.0);
  for (const double nll : {1.0, 2.0, 3.0, 4.0}) stats.Add(nll);
  EXPECT_EQ(stats.count(), 4u);
  EXPECT_DOUBLE_EQ(stats.mean(), 2.5);
  EXPECT_DOUBLE_EQ(stats.variance(), 1.25);
  EXPECT_DOUBLE_EQ(stats.Perplexity(), std::exp(2.5));
  // llama-perplexity: PPL × sqrt(var / (count - 1)).
  EXPECT_DOUBLE_EQ(stats.PerplexityUncertainty(), std::exp(2.5) * std::sqrt(1.25 / 3.0));
}

TEST(KlDivergence, AnalyticAndIdentical) {
  const std::vector<float> base = {std::log(0.5f), std::log(0.5f)};
  const std::vector<float> logits = {std::log(0.25f) + 7.0f, std::log(0.75f) + 7.0f};
  EXPECT_NEAR(KlDivergence(base, logits), 0.5 * std::log(2.0) + 0.5 * std::log(0.5 / 0.75), 1e-6);
  const std::vector<float> random = RandomLogits(3000, 2);
  std::vector<float> row(random.size());
  LogSoftmax(random, row);
  EXPECT_NEAR(KlDivergence(row, random), 0.0, 1e-6);
  const std::vector<float> other = RandomLogits(3000, 3);
  EXPECT_GT(KlDivergence(row, other), 1.0);
}

TEST(KldStats, Figures) {
  KldStats same;
  for (const double nll : {1.0, 2.0, 4.0}) same.Add(0.0, true, nll, nll);
  EXPECT_DOUBLE_EQ(same.MeanKld().value, 0.0);
  EXPECT_DOUBLE_EQ(same.SameTopPercent().value, 100.0);
  EXPECT_DOUBLE_EQ(same.SameTopPercent().uncertainty, 0.0);
  EXPECT_NEAR(same.DeltaPerplexity().value, 0.0, 1e-12);
  EXPECT_NEAR(same.DeltaPerplexity().uncertainty, 0.0, 1e-6);
  EXPECT_NEAR(same.MeanLogPerplexityRatio().value, 0.0, 1e-12);

  KldStats stats;
  stats.Add(0.1, true, 1.0, 1.2);
  stats.Add(0.3, false, 2.0, 2.0);
  stats.Add(0.2, true, 3.0, 3.4);
  stats.Add(0.0, true, 2.0, 2.0);
  EXPECT_NEAR(stats.MeanKld().value, 0.15, 1e-12);
  // sqrt(var / (n - 1)), var = mean(x²) - mean(x)² = 0.035 - 0.0225.
  EXPECT_NEAR(stats.MeanKld().uncertainty, std::sqrt(0.0125 / 3.0), 1e-12);
  EXPECT_DOUBLE_EQ(stats.MaxKld(), 0.3);
  EXPECT_DOUBLE_EQ(stats.SameTopPercent().value, 75.0);
  EXPECT_NEAR(stats.SameTopPercent().uncertainty, 100.0 * std::sqrt(0.75 * 0.25 / 3.0), 1e-9);
  EXPECT_NEAR(stats.MeanLogPerplexityRatio().value, 0.15, 1e-12);
  EXPECT_NEAR(stats.DeltaPerplexity().value, std::exp(2.15) - std::exp(2.0), 1e-9);
  // The differences vary far less than either NLL: the covariance is what makes Δppl precise.
  EXPECT_LT(stats.DeltaPerplexity().uncertainty, stats.model().PerplexityUncertainty() / 3);
}

// A base file of two windows of 8 over a vocabulary of 300, written from known logits.
struct WrittenBase {
  std::string path;
  KldBaseHeader header;
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // per scored position
};

WrittenBase WriteBase(const std::string& name) {
  WrittenBase base;
  base.path = ScratchPath(name);
  base.header = {.n_vocab = 300, .n_ctx = 8, .n_chunks = 2, .vocab_hash = 0x1234};
  base.tokens.resize(16);
  for (size_t i = 0; i < base.tokens.size(); ++i) base.tokens[i] = int32_t((i * 37) % 300);
  auto file = AtomicFile::Create(base.path);
  EXPECT_TRUE(file.ok());
  auto writer = KldBaseWriter::Begin(std::move(*file), base.header, base.tokens);
  EXPECT_TRUE(writer.ok()) << writer.status().message();
  const ChunkPlan plan = *PlanChunks(16, 8);
  for (size_t w = 0; w < plan.n_chunks; ++w) {
    for (size_t j = plan.first; j + 1 < plan.n_ctx; ++j) {
      base.logits.push_back(RandomLogits(300, uint32_t(10 * w + j), 6.0f));
      writer->Add(base.logits.back(), base.tokens[w * 8 + j + 1]);
    }
  }
  Status status = writer->Commit();
  EXPECT_TRUE(status.ok()) << status.message();
  return base;
}

TEST(KldBaseFile, RoundTrip) {
  const WrittenBase base = WriteBase("roundtrip");
  EXPECT_EQ(std::filesystem::file_size(base.path), BaseFileBytes(base.header));
  EXPECT_EQ(BaseFileBytes(base.header), 40u + 16 * 4 + 6 * (12 + 600));
  auto reader = KldBaseReader::Open(base.path);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  EXPECT_EQ(reader->header().n_vocab, 300u);
  EXPECT_EQ(reader->header().vocab_hash, 0x1234u);
  EXPECT_EQ(reader->tokens(), base.tokens);
  EXPECT_EQ(reader->plan().scored(), 6u);
  KldBaseRecord record;
  size_t position = 0;
  for (size_t w = 0; w < 2; ++w) {
    for (size_t j = 4; j < 7; ++j, ++position) {
      ASSERT_TRUE(reader->Next(&record).ok());
      const std::vector<float>& logits = base.logits[position];
      const int32_t target = base.tokens[w * 8 + j + 1];
      EXPECT_NEAR(record.target_log_prob, LogProbOf(logits, target), 1e-6);
      EXPECT_EQ(record.argmax, Argmax(logits));
      std::vector<float> exact(300);
      LogSoftmax(logits, exact);
      const float low = *std::min_element(exact.begin(), exact.end());
      for (size_t i = 0; i < 300; ++i) {
        // Half a step of |low| / 65535, plus the renormalisation's shift.
        EXPECT_NEAR(record.log_probs[i], exact[i], -low / 65535.0 + 1e-5) << i;
      }
      // The rounding is far below any divergence worth measuring.
      EXPECT_LT(KlDivergence(record.log_probs, logits), 1e-6);
    }
  }
  EXPECT_FALSE(reader->Next(&record).ok());  // no positions left
  std::filesystem::remove(base.path);
}

TEST(KldBaseFile, RefusesDamagedFiles) {
  const WrittenBase base = WriteBase("damaged");
  std::string bytes;
  {
    std::ifstream in(base.path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto expect_refused = [&](const std::string& content, const std::string& needle) {
    const std::string path = ScratchPath("damaged_copy");
    {
      std::ofstream out(path, std::ios::binary);
      out << content;
    }
    auto reader = KldBaseReader::Open(path);
    ASSERT_FALSE(reader.ok()) << needle;
    EXPECT_NE(reader.status().message().find(needle), std::string::npos)
        << reader.status().message();
    std::filesystem::remove(path);
  };
  expect_refused(bytes.substr(0, bytes.size() - 1), "truncated or corrupt");
  expect_refused(bytes + "x", "truncated or corrupt");
  expect_refused("hello", "not a KL-divergence base file");
  expect_refused("", "not a KL-divergence base file");
  std::string version = bytes;
  version[8] = 2;
  expect_refused(version, "version 2");
  std::string token = bytes;
  const int32_t outside = 300;
  std::memcpy(token.data() + 40, &outside, 4);
  expect_refused(token, "outside the vocabulary");
  std::string huge = bytes;
  const uint32_t chunks = 0xFFFFFFFFu;
  std::memcpy(huge.data() + 20, &chunks, 4);
  expect_refused(huge, "truncated or corrupt");
  // Every count at its largest: the size must not wrap around.
  std::string widest = bytes;
  for (const size_t offset : {12, 16, 20}) std::memcpy(widest.data() + offset, &chunks, 4);
  expect_refused(widest, "truncated or corrupt");
  auto missing = KldBaseReader::Open(ScratchPath("no_such_file"));
  ASSERT_FALSE(missing.ok());
  std::filesystem::remove(base.path);
}

TEST(KldBaseFile, IncompleteWriteLeavesNoFile) {
  const std::string path = ScratchPath("incomplete");
  auto file = AtomicFile::Create(path);
  ASSERT_TRUE(file.ok());
  const KldBaseHeader header{.n_vocab = 10, .n_ctx = 8, .n_chunks = 1, .vocab_hash = 0};
  const std::vector<int32_t> tokens(8, 1);
  auto writer = KldBaseWriter::Begin(std::move(*file), header, tokens);
  ASSERT_TRUE(writer.ok());
  writer->Add(RandomLogits(10, 5), 1);  // 1 of the 3 scored positions
  EXPECT_FALSE(writer->Commit().ok());
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(HashVocabulary, DependsOnEveryText) {
  const std::vector<std::string> a = {"a", "bc", "d"};
  const std::vector<std::string> b = {"ab", "c", "d"};  // same bytes, other split
  auto hash = [](const std::vector<std::string>& v) {
    return HashVocabulary(v.size(), [&v](int32_t id) { return std::string_view(v[size_t(id)]); });
  };
  EXPECT_EQ(hash(a), hash(a));
  EXPECT_NE(hash(a), hash(b));
}

}  // namespace
}  // namespace petrel
