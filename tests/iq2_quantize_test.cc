// The IQ2 and IQ1 quantizers against llama-quantize: every row of every tensor of the type in the
// synth-tiny-lowbit files, re-quantized from the F32 base with the same importance matrix, must be
// byte-identical. Also: these types refuse to be written without an importance matrix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/eval/imatrix_file.h"
#include "core/format/gguf.h"
#include "quant/iq2_search.h"
#include "quant/quantize.h"
#include "quant/quantize_weighted.h"
#include "util/test_data.h"

namespace petrel {
namespace {

struct Fixture {
  const char* file;  // tiny-v2048-<file>.gguf
  DType type;
};

// ftype IQ2_M writes IQ2_S tensors: the pure IQ2_S file is llama-quantize's `--pure IQ2_M`, and
// the IQ2_M mix holds IQ2_S too.
constexpr Fixture kFixtures[] = {
    {"iq2_xxs", DType::kIQ2_XXS}, {"iq2_xs", DType::kIQ2_XS}, {"iq2_s", DType::kIQ2_S},
    {"iq2_m", DType::kIQ2_S},     {"iq1_s", DType::kIQ1_S},   {"iq1_m", DType::kIQ1_M},
};

constexpr DType kTypes[] = {DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ1_S,
                            DType::kIQ1_M};

// Processor time of this process in seconds: on a shared machine a steadier speed figure than the
// wall clock.
double CpuSeconds() { return double(std::clock()) / CLOCKS_PER_SEC; }

std::string ModelPath(const std::string& name) { return testing::SharedDir() + "/models/" + name; }

// Rows like a weight matrix's (roughly normal, a few outliers) and an importance with a wide
// spread across columns, as activations have.
struct Data {
  std::vector<float> rows;        // (n_rows, kRow)
  std::vector<float> importance;  // (kRow)
};
constexpr size_t kRow = 1024;

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

std::vector<uint8_t> QuantizeAll(DType type, const Data& data, const float* importance) {
  const size_t row_bytes = *RowBytes(type, kRow), n_rows = data.rows.size() / kRow;
  std::vector<uint8_t> bytes(row_bytes * n_rows);
  for (size_t r = 0; r < n_rows; ++r) {
    EXPECT_TRUE(QuantizeRowWeighted(type, data.rows.data() + r * kRow, bytes.data() + r * row_bytes,
                                    kRow, importance));
  }
  return bytes;
}

// Runs first in this file, so the threads race to build the search tables: each table is built
// once and every thread sees it whole (the same bytes as a later single-threaded run).
TEST(IQ2Quantize, FirstUseFromManyThreads) {
  const Data data = MakeData(8, 5);
  constexpr size_t kThreads = 4;
  std::vector<std::vector<uint8_t>> results(kThreads * std::size(kTypes));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread visits the types in a different order.
      for (size_t k = 0; k < std::size(kTypes); ++k) {
        const size_t type = (k + t) % std::size(kTypes);
        results[t * std::size(kTypes) + type] =
            QuantizeAll(kTypes[type], data, data.importance.data());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t type = 0; type < std::size(kTypes); ++type) {
    SCOPED_TRACE(DTypeName(kTypes[type]));
    const std::vector<uint8_t> want = QuantizeAll(kTypes[type], data, data.importance.data());
    for (size_t t = 0; t < kThreads; ++t) EXPECT_EQ(results[t * std::size(kTypes) + type], want);
  }
}

// The search tables: every grid point maps to itself; every other pattern of levels 0..2 has
// neighbours, those at its `shells` nearest distinct distances, in (distance, index) order.
TEST(IQ2Quantize, SearchTablesAreConsistent) {
  struct Case {
    quant::IQ2Codebook codebook;
    size_t size;
    int shells;
  };
  const Case kCases[] = {{quant::IQ2Codebook::kIQ2XXS, 256, 2},
                         {quant::IQ2Codebook::kIQ2XS, 512, 2},
                         {quant::IQ2Codebook::kIQ2S, 1024, 1},
                         {quant::IQ2Codebook::kIQ1S, 2048, 3}};
  for (const Case& c : kCases) {
    const quant::IQ2SearchTable& table = quant::IQ2SearchTable::For(c.codebook);
    ASSERT_EQ(table.size(), c.size);
    const auto key_of = [](const int8_t* point) {
      quant::IQ2Key key = 0;
      for (int i = 0; i < 8; ++i) key = quant::IQ2Key(key | (((point[i] - 1) / 2) << (2 * i)));
      return key;
    };
    for (size_t j = 0; j < table.size(); ++j) {
      ASSERT_EQ(table.IndexOf(key_of(table.Point(int(j)))), int(j));
      ASSERT_TRUE(table.Neighbours(key_of(table.Point(int(j)))).empty());
    }
    for (int pattern = 0; pattern < 6561; ++pattern) {
      int8_t pos[8];
      for (int i = 0, rest = pattern; i < 8; ++i, rest /= 3) pos[i] = int8_t(2 * (rest % 3) + 1);
      const quant::IQ2Key key = key_of(pos);
      if (table.IndexOf(key) >= 0) continue;
      const auto distance = [&](int index) {
        int d2 = 0;
        for (int i = 0; i < 8; ++i) {
          d2 += (table.Point(index)[i] - pos[i]) * (table.Point(index)[i] - pos[i]);
        }
        return d2;
      };
      // The distances of the whole grid, to find the nearest `shells` of them.
      std::vector<int> all;
      for (size_t j = 0; j < table.size(); ++j) all.push_back(distance(int(j)));
      std::sort(all.begin(), all.end());
      all.erase(std::unique(all.begin(), all.end()), all.end());
      const int limit = all[std::min(all.size(), size_t(c.shells)) - 1];
      size_t want = 0;
      for (size_t j = 0; j < table.size(); ++j) want += distance(int(j)) <= limit;
      const std::span<const uint16_t> neighbours = table.Neighbours(key);
      ASSERT_EQ(neighbours.size(), want) << pattern;
      for (size_t j = 1; j < neighbours.size(); ++j) {
        const int a = distance(neighbours[j - 1]), b = distance(neighbours[j]);
        ASSERT_TRUE(a < b || (a == b && neighbours[j - 1] < neighbours[j])) << pattern;
      }
      ASSERT_LE(distance(neighbours.back()), limit);
    }
  }
}

TEST(IQ2Quantize, ReproducesLlamaQuantizeWithTheImatrix) {
  auto base = GgufFile::Open(ModelPath("synth-tiny/tiny-v2048-f32.gguf"));
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto imatrix = ReadImatrix(testing::SharedDir() + "/golden/synth-tiny/imatrix-tiny-v2048.gguf");
  ASSERT_TRUE(imatrix.ok()) << imatrix.status().message();
  for (const Fixture& fixture : kFixtures) {
    SCOPED_TRACE(fixture.file);
    auto file = GgufFile::Open(
        ModelPath(std::string("synth-tiny-lowbit/tiny-v2048-") + fixture.file + ".gguf"));
    ASSERT_TRUE(file.ok()) << file.status().message();
    size_t n_tensors = 0, n_rows = 0, n_equal_rows = 0, cols_seen = 0;
    double seconds = 0;
    // The first row of a type builds its search table unless an earlier test did (run this test
    // alone to time that); timed apart from the rows/s.
    double first_row_seconds = 0;
    for (const GgufTensorInfo& info : (*file)->tensors()) {
      if (info.desc.dtype != fixture.type) continue;
      SCOPED_TRACE(info.name);
      // Only ffn_down (rows of 768) is a whole number of 256-blocks in this model.
      EXPECT_NE(info.name.find("ffn_down"), std::string::npos);
      const GgufTensorInfo* source = (*base)->FindTensor(info.name);
      ASSERT_NE(source, nullptr);
      ASSERT_EQ(source->desc.dtype, DType::kF32);
      const auto entry = imatrix->entries.find(info.name);
      ASSERT_NE(entry, imatrix->entries.end());
      const std::vector<float> importance = entry->second.Importance();
      const size_t cols = size_t(info.desc.ne[0]), row_bytes = info.desc.row_bytes();
      ASSERT_EQ(importance.size(), cols);
      ++n_tensors;
      cols_seen = cols;
      std::vector<uint8_t> ours(row_bytes * size_t(info.desc.n_rows()));
      if (n_tensors == 1) {
        const double start = CpuSeconds();
        ASSERT_TRUE(QuantizeRowWeighted(fixture.type, static_cast<const float*>(source->data),
                                        ours.data(), cols, importance.data()));
        first_row_seconds = CpuSeconds() - start;
      }
      const double start = CpuSeconds();
      for (size_t r = 0; r < size_t(info.desc.n_rows()); ++r) {
        const float* x = static_cast<const float*>(source->data) + r * cols;
        ASSERT_TRUE(QuantizeRowWeighted(fixture.type, x, ours.data() + r * row_bytes, cols,
                                        importance.data()));
      }
      seconds += CpuSeconds() - start;
      for (size_t r = 0; r < size_t(info.desc.n_rows()); ++r) {
        const bool equal =
            std::memcmp(ours.data() + r * row_bytes,
                        static_cast<const uint8_t*>(info.data) + r * row_bytes, row_bytes) == 0;
        n_equal_rows += equal;
        ++n_rows;
        if (!equal && n_rows - n_equal_rows <= 3) ADD_FAILURE() << "row " << r << " differs";
      }
    }
    EXPECT_GT(n_tensors, 0u);
    EXPECT_EQ(n_equal_rows, n_rows);
    std::printf(
        "%-8s %-7s: %zu tensors, %zu/%zu rows identical, %.0f rows/s of %zu (CPU time), first row "
        "%.3f s\n",
        fixture.file, DTypeName(fixture.type), n_tensors, n_equal_rows, n_rows, n_rows / seconds,
        cols_seen, first_row_seconds);
  }
}

TEST(IQ2Quantize, NeedsAnImportanceMatrix) {
  std::vector<float> row(512, 0.25f), importance(512, 1.f);
  for (size_t i = 0; i < row.size(); ++i) row[i] = float(int(i % 7) - 3) * 0.01f;
  for (DType type : kTypes) {
    SCOPED_TRACE(DTypeName(type));
    EXPECT_TRUE(NeedsImportance(type));
    EXPECT_TRUE(TakesImportance(type));
    EXPECT_TRUE(CanQuantizeWithImportance(type));
    EXPECT_FALSE(CanQuantize(type));
    std::vector<uint8_t> bytes(*RowBytes(type, row.size()));
    EXPECT_FALSE(QuantizeRow(type, row.data(), bytes.data(), row.size()));
    EXPECT_FALSE(QuantizeRowWeighted(type, row.data(), bytes.data(), row.size(), nullptr));
    EXPECT_TRUE(QuantizeRowWeighted(type, row.data(), bytes.data(), row.size(), importance.data()));
    // Not a whole number of 256-blocks.
    EXPECT_FALSE(QuantizeRowWeighted(type, row.data(), bytes.data(), 288, importance.data()));
  }
}

// All-zero rows and sub-blocks, and all-zero importance, are encoded without trouble and decode
// to zeros.
TEST(IQ2Quantize, ZeroRowsAndZeroImportance) {
  std::vector<float> zeros(256, 0.f), ones(256, 1.f), back(256);
  for (DType type : kTypes) {
    SCOPED_TRACE(DTypeName(type));
    std::vector<uint8_t> bytes(*RowBytes(type, 256));
    ASSERT_TRUE(QuantizeRowWeighted(type, zeros.data(), bytes.data(), 256, ones.data()));
    ASSERT_TRUE(DequantizeRow(type, bytes.data(), back.data(), 256));
    for (float v : back) EXPECT_EQ(std::fabs(v), 0.f);
    std::vector<float> row(256);
    for (size_t i = 0; i < row.size(); ++i) row[i] = float(int(i % 5) - 2);
    ASSERT_TRUE(QuantizeRowWeighted(type, row.data(), bytes.data(), 256, zeros.data()));
  }
}

// Σ importance · (x − dequantized)² over every row.
double WeightedError(DType type, const Data& data, const std::vector<uint8_t>& bytes) {
  const size_t row_bytes = *RowBytes(type, kRow);
  std::vector<float> back(kRow);
  double error = 0;
  for (size_t r = 0; r < data.rows.size() / kRow; ++r) {
    EXPECT_TRUE(DequantizeRow(type, bytes.data() + r * row_bytes, back.data(), kRow));
    for (size_t j = 0; j < kRow; ++j) {
      const double d = double(data.rows[r * kRow + j]) - back[j];
      error += data.importance[j] * d * d;
    }
  }
  return error;
}

// The search follows the importance: the importance-weighted error is lower than with a uniform
// importance, and the error stays within what 1.5 to 2.5 bits can do.
TEST(IQ2Quantize, ImportanceLowersTheWeightedError) {
  const Data data = MakeData(32, 3);
  const std::vector<float> uniform(kRow, 1.f);
  double weighted_x2 = 0;
  for (size_t r = 0; r < data.rows.size() / kRow; ++r) {
    for (size_t j = 0; j < kRow; ++j) {
      weighted_x2 += data.importance[j] * data.rows[r * kRow + j] * data.rows[r * kRow + j];
    }
  }
  for (DType type : kTypes) {
    const double plain = WeightedError(type, data, QuantizeAll(type, data, uniform.data()));
    const double weighted =
        WeightedError(type, data, QuantizeAll(type, data, data.importance.data()));
    std::printf("%-7s relative weighted error: uniform %.3f, importance %.3f\n", DTypeName(type),
                std::sqrt(plain / weighted_x2), std::sqrt(weighted / weighted_x2));
    EXPECT_LT(weighted, plain * 0.97) << DTypeName(type);
    EXPECT_LT(std::sqrt(weighted / weighted_x2), 0.7) << DTypeName(type);
  }
}

}  // namespace
}  // namespace petrel
