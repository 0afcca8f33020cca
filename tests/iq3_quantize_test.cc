// The IQ3_XXS and IQ3_S encoders against llama-quantize: the F32 base's tensors of that type,
// quantized with the same importance matrix, give the fixture files' bytes exactly; round trips
// through the decoders; the search tables.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/eval/imatrix_file.h"
#include "core/format/gguf.h"
#include "gtest/gtest.h"
#include "quant/iq3_search.h"
#include "quant/quantize.h"
#include "quant/quantize_weighted.h"
#include "quant/types.h"
#include "util/test_data.h"

namespace petrel {
namespace {

std::string BasePath() { return testing::SharedDir() + "/models/synth-tiny/tiny-v2048-f32.gguf"; }
std::string LowbitPath(const std::string& name) {
  return testing::SharedDir() + "/models/synth-tiny-lowbit/tiny-v2048-" + name + ".gguf";
}
std::string ImatrixPath() {
  return testing::SharedDir() + "/golden/synth-tiny/imatrix-tiny-v2048.gguf";
}

// Every tensor of `type` in the llama-quantize file `name` (made with `--pure --imatrix`),
// re-encoded from the F32 base with the imatrix entry (through the codec table): same bytes.
void ExpectSameBytesAsLlamaQuantize(const std::string& name, DType type) {
  auto base = GgufFile::Open(BasePath());
  ASSERT_TRUE(base.ok()) << base.status().message();
  auto fixture = GgufFile::Open(LowbitPath(name));
  ASSERT_TRUE(fixture.ok()) << fixture.status().message();
  auto imatrix = ReadImatrix(ImatrixPath());
  ASSERT_TRUE(imatrix.ok()) << imatrix.status().message();
  int n_checked = 0;
  for (const GgufTensorInfo& info : (*fixture)->tensors()) {
    if (info.desc.dtype != type) continue;
    SCOPED_TRACE(info.name);
    const GgufTensorInfo* source = (*base)->FindTensor(info.name);
    ASSERT_NE(source, nullptr);
    ASSERT_EQ(source->desc.dtype, DType::kF32);
    const auto entry = imatrix->entries.find(info.name);
    ASSERT_NE(entry, imatrix->entries.end());
    const std::vector<float> importance = entry->second.Importance();
    const size_t n_in = size_t(info.desc.ne[0]);
    ASSERT_EQ(importance.size(), n_in);
    const size_t row_bytes = info.desc.row_bytes();
    std::vector<uint8_t> row(row_bytes);
    int64_t n_rows_differing = 0;
    for (int64_t r = 0; r < info.desc.n_rows(); ++r) {
      const float* x = reinterpret_cast<const float*>(source->data) + size_t(r) * n_in;
      ASSERT_TRUE(QuantizeRowWeighted(type, x, row.data(), n_in, importance.data()));
      const void* expected = static_cast<const uint8_t*>(info.data) + size_t(r) * row_bytes;
      if (std::memcmp(row.data(), expected, row_bytes) != 0) ++n_rows_differing;
    }
    EXPECT_EQ(n_rows_differing, 0) << "of " << info.desc.n_rows() << " rows";
    ++n_checked;
  }
  EXPECT_GT(n_checked, 0) << "no " << DTypeName(type) << " tensor in " << name;
}

TEST(IQ3QuantizeTest, IQ3_XXSMatchesLlamaQuantize) {
  ExpectSameBytesAsLlamaQuantize("iq3_xxs", DType::kIQ3_XXS);
}

TEST(IQ3QuantizeTest, IQ3_SMatchesLlamaQuantize) {
  ExpectSameBytesAsLlamaQuantize("iq3_s", DType::kIQ3_S);
}

// Relative RMS error of `type` on Gaussian rows (with and without importance where allowed),
// through the decoder; and the codec table's contract: IQ3_XXS only with importance.
float RoundTripError(DType type, const std::vector<float>& x, const float* importance) {
  std::vector<uint8_t> encoded(Traits(type).block_bytes * x.size() / Traits(type).block_elems);
  EXPECT_TRUE(QuantizeRowWeighted(type, x.data(), encoded.data(), x.size(), importance));
  std::vector<float> decoded(x.size());
  EXPECT_TRUE(DequantizeRow(type, encoded.data(), decoded.data(), x.size()));
  double error2 = 0, norm2 = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    error2 += double(decoded[i] - x[i]) * (decoded[i] - x[i]);
    norm2 += double(x[i]) * x[i];
  }
  return float(std::sqrt(error2 / norm2));
}

TEST(IQ3QuantizeTest, RoundTripsThroughTheDecoders) {
  std::mt19937 rng(7);
  std::normal_distribution<float> gauss(0.f, 1.f);
  std::uniform_real_distribution<float> uniform(0.1f, 2.f);
  constexpr size_t kRow = 4 * 256;
  std::vector<float> x(kRow), importance(kRow);
  for (float& v : x) v = gauss(rng);
  for (float& v : importance) v = uniform(rng);
  // A zero super-block: written as zeros (d = 0) by both.
  std::fill(x.begin() + 512, x.begin() + 768, 0.f);
  EXPECT_LT(RoundTripError(DType::kIQ3_S, x, importance.data()), 0.17f);
  EXPECT_LT(RoundTripError(DType::kIQ3_S, x, nullptr), 0.19f);
  // A zero group inside a super-block: IQ3_XXS leaves it zero. (IQ3_S does not round-trip
  // one: llama-quantize writes the following groups' codes one group early there, and so do
  // we, for the same bytes.)
  std::fill(x.begin() + 32, x.begin() + 64, 0.f);
  EXPECT_LT(RoundTripError(DType::kIQ3_XXS, x, importance.data()), 0.21f);

  EXPECT_TRUE(NeedsImportance(DType::kIQ3_XXS));
  EXPECT_FALSE(NeedsImportance(DType::kIQ3_S));
  EXPECT_TRUE(TakesImportance(DType::kIQ3_S));
  std::vector<uint8_t> out(Traits(DType::kIQ3_XXS).block_bytes * kRow / 256);
  EXPECT_FALSE(QuantizeRow(DType::kIQ3_XXS, x.data(), out.data(), kRow));
  EXPECT_FALSE(QuantizeRowWeighted(DType::kIQ3_XXS, x.data(), out.data(), kRow, nullptr));
  EXPECT_TRUE(CanQuantize(DType::kIQ3_S));
}

// The search tables: every code in the codebook maps to its entry, every other code has
// neighbours, all of them codebook entries; the two grids have their ggml sizes.
TEST(IQ3QuantizeTest, SearchTablesAreConsistent) {
  for (const quant::IQ3SearchTables* tables :
       {&quant::IQ3XXSSearchTables(), &quant::IQ3SSearchTables()}) {
    const size_t grid_size = tables->grid.size() / 4;
    EXPECT_TRUE(grid_size == 256 || grid_size == 512);
    size_t n_on_grid = 0;
    for (int code = 0; code < quant::IQ3SearchTables::kCodes; ++code) {
      const int index = tables->index_of_code[size_t(code)];
      const uint32_t begin = tables->neighbour_begin[size_t(code)];
      const uint32_t end = tables->neighbour_begin[size_t(code) + 1];
      if (index >= 0) {
        ++n_on_grid;
        EXPECT_EQ(begin, end);
        const int8_t* levels = tables->Levels(index);
        int back = 0;
        for (int i = 0; i < 4; ++i) back |= ((levels[i] - 1) / 2) << (3 * i);
        EXPECT_EQ(back, code);
      } else {
        EXPECT_LT(begin, end);
        for (uint32_t n = begin; n < end; ++n) EXPECT_LT(tables->neighbours[n], grid_size);
      }
    }
    EXPECT_EQ(n_on_grid, grid_size);
  }
}

// Concurrent first use builds each table once and every caller sees the same one.
TEST(IQ3QuantizeTest, TablesAreSharedAcrossThreads) {
  std::vector<const quant::IQ3SearchTables*> seen(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < seen.size(); ++t) {
    threads.emplace_back([&seen, t] {
      seen[t] = t % 2 ? &quant::IQ3SSearchTables() : &quant::IQ3XXSSearchTables();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t t = 0; t < seen.size(); ++t) {
    EXPECT_EQ(seen[t], t % 2 ? &quant::IQ3SSearchTables() : &quant::IQ3XXSSearchTables());
  }
}

}  // namespace
}  // namespace petrel
