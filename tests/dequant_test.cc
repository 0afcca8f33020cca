// The scalar quant codecs: exact dequantization of every synth-tiny file against golden/dequant,
// byte-exact requantization of the F32 file against llama-quantize's output, and round trips.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/format/gguf.h"
#include "gtest/gtest.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "util/test_data.h"

namespace petrel {
namespace {

std::string GoldenDir() { return testing::SharedDir() + "/golden/synth-tiny/dequant"; }
std::string ModelDir() { return testing::SharedDir() + "/models/synth-tiny"; }

std::vector<float> ReadF32File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

nlohmann::json ReadManifest() {
  std::ifstream in(GoldenDir() + "/dequant.json");
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// Distance in units in the last place between two finite floats of the same sign (or zeros).
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return std::llabs(int64_t(ia) - int64_t(ib));
}

TEST(DequantTest, EveryFileMatchesGolden) {
  const nlohmann::json manifest = ReadManifest();
  ASSERT_TRUE(manifest.is_object()) << "missing " << GoldenDir() << "/dequant.json";
  size_t n_checked = 0;
  for (const auto& [golden_name, entry] : manifest["files"].items()) {
    SCOPED_TRACE(golden_name);
    const std::vector<float> golden = ReadF32File(GoldenDir() + "/" + golden_name);
    ASSERT_FALSE(golden.empty());
    auto file = GgufFile::Open(ModelDir() + "/" + entry["model"].get<std::string>());
    ASSERT_TRUE(file.ok()) << file.status().message();
    for (const auto& tensor : entry["tensors"]) {
      const std::string name = tensor["tensor"];
      SCOPED_TRACE(name);
      const GgufTensorInfo* info = (*file)->FindTensor(name);
      ASSERT_NE(info, nullptr);
      EXPECT_STREQ(DTypeName(info->desc.dtype), tensor["ggml_type"].get<std::string>().c_str());
      const size_t rows = tensor["rows"], cols = tensor["cols"], offset = tensor["offset"];
      ASSERT_EQ(size_t(info->desc.ne[0]), cols);
      ASSERT_LE(offset + rows * cols, golden.size());
      std::vector<float> row(cols);
      for (size_t r = 0; r < rows; ++r) {
        const char* src = static_cast<const char*>(info->data) + r * info->desc.row_bytes();
        ASSERT_TRUE(DequantizeRow(info->desc.dtype, src, row.data(), cols));
        for (size_t c = 0; c < cols; ++c) {
          const float want = golden[offset + r * cols + c];
          ASSERT_LE(UlpDistance(row[c], want), 1)
              << "row " << r << " col " << c << ": " << row[c] << " vs " << want;
        }
      }
      ++n_checked;
    }
  }
  EXPECT_EQ(n_checked, 15u * 5u);
}

// llama-quantize made every synth-tiny file from the F32 one without an importance matrix, so
// our reference quantizers must reproduce its bytes exactly.
TEST(DequantTest, QuantizersReproduceLlamaQuantize) {
  auto base = GgufFile::Open(ModelDir() + "/tiny-v2048-f32.gguf");
  ASSERT_TRUE(base.ok()) << base.status().message();
  const char* kFiles[] = {"q8_0", "q4_0", "q4_1", "q5_0",   "q5_1",   "q2_k", "q3_k",
                          "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "f16",  "bf16"};
  for (const char* type_name : kFiles) {
    SCOPED_TRACE(type_name);
    auto file = GgufFile::Open(ModelDir() + "/tiny-v2048-" + type_name + ".gguf");
    ASSERT_TRUE(file.ok());
    size_t n_tensors = 0, n_equal_rows = 0, n_rows = 0;
    for (const GgufTensorInfo& info : (*file)->tensors()) {
      const GgufTensorInfo* source = (*base)->FindTensor(info.name);
      ASSERT_NE(source, nullptr);
      if (info.desc.dtype == DType::kF32) continue;
      ++n_tensors;
      const size_t cols = size_t(info.desc.ne[0]), row_bytes = info.desc.row_bytes();
      std::vector<uint8_t> ours(row_bytes);
      const size_t max_rows = std::min<size_t>(size_t(info.desc.n_rows()), 64);
      for (size_t r = 0; r < max_rows; ++r) {
        const float* x = static_cast<const float*>(source->data) + r * cols;
        ASSERT_TRUE(QuantizeRow(info.desc.dtype, x, ours.data(), cols));
        const bool equal =
            std::memcmp(ours.data(), static_cast<const char*>(info.data) + r * row_bytes,
                        row_bytes) == 0;
        n_equal_rows += equal;
        ++n_rows;
        if (!equal && n_rows - n_equal_rows <= 1) {
          ADD_FAILURE() << info.name << " (" << DTypeName(info.desc.dtype) << ") row " << r
                        << " differs";
        }
      }
    }
    EXPECT_GT(n_tensors, 0u);
    EXPECT_EQ(n_equal_rows, n_rows);
  }
}

struct RoundTripCase {
  DType type;
  double max_rel_rms;  // RMS(dequantized - x) / RMS(x) for N(0, 1) data
};

TEST(DequantTest, RoundTripErrorWithinBounds) {
  const RoundTripCase kCases[] = {
      {DType::kF16, 1e-3},    {DType::kBF16, 5e-3},   {DType::kQ8_0, 0.01}, {DType::kQ8_1, 0.01},
      {DType::kQ8_K, 0.02},   {DType::kQ6_K, 0.03},   {DType::kQ5_0, 0.06}, {DType::kQ5_1, 0.06},
      {DType::kQ5_K, 0.05},   {DType::kQ4_0, 0.12},   {DType::kQ4_1, 0.12}, {DType::kQ4_K, 0.1},
      {DType::kIQ4_NL, 0.12}, {DType::kIQ4_XS, 0.12}, {DType::kQ3_K, 0.25}, {DType::kQ2_K, 0.45},
  };
  // A fresh seed per run, printed so that a failure can be replayed.
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr size_t kN = 256 * 16;
  std::vector<float> x(kN), back(kN);
  for (float& v : x) v = normal(rng);
  // Outliers and an all-zero block, the cases scale searches get wrong.
  x[17] = 9.0f;
  x[300] = -11.0f;
  std::fill(x.begin() + 1024, x.begin() + 1280, 0.0f);
  for (const RoundTripCase& c : kCases) {
    SCOPED_TRACE(DTypeName(c.type));
    std::vector<uint8_t> packed(*RowBytes(c.type, kN));
    ASSERT_TRUE(QuantizeRow(c.type, x.data(), packed.data(), kN));
    ASSERT_TRUE(DequantizeRow(c.type, packed.data(), back.data(), kN));
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < kN; ++i) {
      ASSERT_TRUE(std::isfinite(back[i]));
      err2 += double(back[i] - x[i]) * (back[i] - x[i]);
      ref2 += double(x[i]) * x[i];
      if (i >= 1024 && i < 1280) {
        ASSERT_EQ(back[i], 0.0f) << i;
      }
    }
    EXPECT_LT(std::sqrt(err2 / ref2), c.max_rel_rms);
  }
}

TEST(DequantTest, RejectsPartialBlocksAndIntegerTypes) {
  float x[48] = {}, y[48];
  uint8_t packed[64];
  EXPECT_FALSE(QuantizeRow(DType::kQ4_0, x, packed, 48));
  EXPECT_FALSE(DequantizeRow(DType::kQ4_K, packed, y, 32));
  EXPECT_FALSE(CanDequantize(DType::kI32));
  EXPECT_TRUE(CanDequantize(DType::kIQ4_XS));
}

}  // namespace
}  // namespace petrel
