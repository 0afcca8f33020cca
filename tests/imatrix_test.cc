// Importance matrices: the weighted quantizers (no importance gives the reference bytes; with one,
// the importance-weighted error falls) and the imatrix files (both layouts round-trip; damaged
// files are one-line errors).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/eval/imatrix_file.h"
#include "quant/quantize.h"
#include "quant/quantize_weighted.h"
#include "util/test_data.h"

namespace petrel {
namespace {

const DType kWeightedTypes[] = {DType::kQ4_0, DType::kQ4_1,   DType::kQ5_0,  DType::kQ5_1,
                                DType::kQ2_K, DType::kQ3_K,   DType::kQ4_K,  DType::kQ5_K,
                                DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

constexpr size_t kRow = 512;

// Rows like a weight matrix's (roughly normal, a few outliers) and an importance with a wide
// spread across columns, as activations have.
struct Data {
  std::vector<float> rows;
  std::vector<float> importance;
};

Data MakeData(size_t n_rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.02f);
  std::lognormal_distribution<float> spread(0.f, 1.5f);
  Data data;
  data.rows.resize(n_rows * kRow);
  for (float& x : data.rows) x = normal(rng);
  for (size_t i = 0; i < data.rows.size(); i += 97) data.rows[i] *= 6;
  data.importance.resize(kRow);
  for (float& w : data.importance) w = spread(rng);
  return data;
}

// Σ importance · (x − dequantized)² over every row.
double WeightedError(DType type, const Data& data, bool weighted) {
  const size_t bytes = *RowBytes(type, kRow);
  std::vector<uint8_t> q(bytes);
  std::vector<float> back(kRow);
  double error = 0;
  for (size_t r = 0; r < data.rows.size() / kRow; ++r) {
    const float* x = data.rows.data() + r * kRow;
    EXPECT_TRUE(
        QuantizeRowWeighted(type, x, q.data(), kRow, weighted ? data.importance.data() : nullptr));
    EXPECT_TRUE(DequantizeRow(type, q.data(), back.data(), kRow));
    for (size_t j = 0; j < kRow; ++j) {
      const double d = double(x[j]) - back[j];
      error += data.importance[j] * d * d;
    }
  }
  return error;
}

TEST(WeightedQuantize, WithoutImportanceTheBytesAreTheReferenceOnes) {
  const Data data = MakeData(4, 1);
  for (DType type : kWeightedTypes) {
    SCOPED_TRACE(DTypeName(type));
    EXPECT_TRUE(TakesImportance(type));
    const size_t bytes = *RowBytes(type, kRow);
    std::vector<uint8_t> reference(bytes), weighted(bytes);
    for (size_t r = 0; r < 4; ++r) {
      const float* x = data.rows.data() + r * kRow;
      ASSERT_TRUE(QuantizeRow(type, x, reference.data(), kRow));
      ASSERT_TRUE(QuantizeRowWeighted(type, x, weighted.data(), kRow, nullptr));
      EXPECT_EQ(reference, weighted);
    }
  }
}

TEST(WeightedQuantize, TypesThatTakeNoImportanceIgnoreIt) {
  const Data data = MakeData(1, 2);
  for (DType type : {DType::kQ8_0, DType::kF16, DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(DTypeName(type));
    EXPECT_FALSE(TakesImportance(type));
    const size_t bytes = *RowBytes(type, kRow);
    std::vector<uint8_t> reference(bytes), weighted(bytes);
    ASSERT_TRUE(QuantizeRow(type, data.rows.data(), reference.data(), kRow));
    ASSERT_TRUE(
        QuantizeRowWeighted(type, data.rows.data(), weighted.data(), kRow, data.importance.data()));
    EXPECT_EQ(reference, weighted);
  }
}

TEST(WeightedQuantize, ImportanceLowersTheImportanceWeightedError) {
  const Data data = MakeData(64, 3);
  for (DType type : kWeightedTypes) {
    const double plain = WeightedError(type, data, false);
    const double weighted = WeightedError(type, data, true);
    EXPECT_LT(weighted, plain * 0.97) << DTypeName(type) << ": " << weighted << " vs " << plain;
  }
}

TEST(WeightedQuantize, UniformImportanceStaysClose) {
  // With every column equally important the weighted search is still a good quantizer: its
  // plain squared error stays within a few percent of the reference one.
  Data data = MakeData(32, 4);
  std::fill(data.importance.begin(), data.importance.end(), 1.0f);
  for (DType type : kWeightedTypes) {
    const double plain = WeightedError(type, data, false);
    const double weighted = WeightedError(type, data, true);
    EXPECT_LT(weighted, plain * 1.05) << DTypeName(type);
  }
}

std::string Scratch(const std::string& name) {
  return testing::ScratchDir() + "/imatrix_test_" + std::to_string(getpid()) + "_" + name;
}

Imatrix SampleImatrix() {
  Imatrix imatrix;
  imatrix.datasets = {"calibration.txt"};
  imatrix.chunk_count = 3;
  imatrix.chunk_size = 128;
  ImatrixEntry a;
  a.n_in = 4;
  a.sum2 = {1.f, 2.f, 3.f, 4.f};
  a.counts = {384.f};
  imatrix.entries.emplace("blk.0.attn_q.weight", a);
  ImatrixEntry b;
  b.n_in = 2;
  b.sum2 = {0.5f, 8.f, 1.f, 2.f};  // two stacked matrices (experts)
  b.counts = {100.f, 200.f};
  imatrix.entries.emplace("blk.0.ffn_down_exps.weight", b);
  return imatrix;
}

TEST(ImatrixFile, GgufRoundTrips) {
  const std::string path = Scratch("rt.gguf");
  const Imatrix written = SampleImatrix();
  ASSERT_TRUE(WriteImatrix(written, path, ImatrixFormat::kGguf).ok());
  auto read = ReadImatrix(path);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->datasets, written.datasets);
  EXPECT_EQ(read->chunk_count, 3u);
  EXPECT_EQ(read->chunk_size, 128u);
  ASSERT_EQ(read->entries.size(), 2u);
  for (const auto& [name, entry] : written.entries) {
    const ImatrixEntry& back = read->entries.at(name);
    EXPECT_EQ(back.n_in, entry.n_in);
    EXPECT_EQ(back.sum2, entry.sum2);
    EXPECT_EQ(back.counts, entry.counts);
  }
  EXPECT_EQ(read->entries.at("blk.0.ffn_down_exps.weight").Importance(1),
            (std::vector<float>{1.f / 200, 2.f / 200}));
  std::remove(path.c_str());
}

TEST(ImatrixFile, DatKeepsTheMeans) {
  const std::string path = Scratch("rt.dat");
  Imatrix written = SampleImatrix();
  written.entries.erase("blk.0.ffn_down_exps.weight");
  ASSERT_TRUE(WriteImatrix(written, path, ImatrixFormat::kDat).ok());
  auto read = ReadImatrix(path);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->datasets, written.datasets);
  EXPECT_EQ(read->chunk_count, 3u);
  const std::vector<float> want = written.entries.at("blk.0.attn_q.weight").Importance();
  const std::vector<float> got = read->entries.at("blk.0.attn_q.weight").Importance();
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < want.size(); ++j) EXPECT_FLOAT_EQ(got[j], want[j]);
  std::remove(path.c_str());
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void ExpectOneLineError(const Result<Imatrix>& result, const std::string& part) {
  ASSERT_FALSE(result.ok());
  const std::string message = result.status().message();
  EXPECT_NE(message.find(part), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(ImatrixFile, TruncatedFilesAreErrors) {
  for (ImatrixFormat format : {ImatrixFormat::kGguf, ImatrixFormat::kDat}) {
    const std::string path = Scratch(format == ImatrixFormat::kGguf ? "t.gguf" : "t.dat");
    ASSERT_TRUE(WriteImatrix(SampleImatrix(), path, format).ok());
    const std::string bytes = ReadBytes(path);
    // Every cut inside the entries: an error, never a crash.
    for (size_t keep : {size_t(2), size_t(4), size_t(10), bytes.size() / 2, bytes.size() - 60}) {
      SCOPED_TRACE(keep);
      WriteBytes(path, bytes.substr(0, keep));
      const auto read = ReadImatrix(path);
      EXPECT_FALSE(read.ok());
      if (!read.ok()) {
        EXPECT_EQ(read.status().message().find('\n'), std::string::npos);
      }
    }
    std::remove(path.c_str());
  }
}

TEST(ImatrixFile, BadCountsAndSumsAreErrors) {
  const std::string path = Scratch("bad.gguf");
  Imatrix zero = SampleImatrix();
  zero.entries.at("blk.0.attn_q.weight").counts = {0.f};
  ASSERT_TRUE(WriteImatrix(zero, path, ImatrixFormat::kGguf).ok());
  ExpectOneLineError(ReadImatrix(path), "count of 0");

  Imatrix negative = SampleImatrix();
  negative.entries.at("blk.0.attn_q.weight").sum2[2] = -1.f;
  ASSERT_TRUE(WriteImatrix(negative, path, ImatrixFormat::kGguf).ok());
  ExpectOneLineError(ReadImatrix(path), "sum of squares");

  Imatrix nan = SampleImatrix();
  nan.entries.at("blk.0.attn_q.weight").sum2[0] = NAN;
  ASSERT_TRUE(WriteImatrix(nan, path, ImatrixFormat::kDat).ok());
  ExpectOneLineError(ReadImatrix(path), "damaged");

  // A legacy file claiming more values than it holds.
  std::string dat;
  auto put = [&](int32_t v) { dat.append(reinterpret_cast<const char*>(&v), 4); };
  put(1);
  put(3);
  dat += "abc";
  put(1);
  put(1000000);
  put(0);
  WriteBytes(path, dat);
  ExpectOneLineError(ReadImatrix(path), "claims 1000000 values");
  std::remove(path.c_str());
}

TEST(ImatrixFile, MissingFileIsAnError) {
  ExpectOneLineError(ReadImatrix(Scratch("absent.gguf")), "cannot open");
}

}  // namespace
}  // namespace petrel
