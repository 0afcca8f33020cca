// The `--bf16-dot` mat_mul (cpu/matmul/bf16_dot.h) against its scalar restatement on fresh random
// inputs, bit for bit; its batch invariance; and the rest of its kernel table left as it was.
#include "cpu/matmul/bf16_dot.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <utility>
#include <vector>

#include "cpu/kernels.h"  // CpuKernels, CpuKernelsWithBf16Dot
#include "quant/f16.h"    // F32ToF16, F32ToBF16
#include "util/bf16_dot_reference.h"

namespace petrel {
namespace {

const HostKernels& Bf16Dot() { return cpu::CpuKernelsWithBf16Dot(/*f16_too=*/true); }

// Random by default (printed on failure); PETREL_TEST_SEED=n reproduces a run.
uint32_t TestSeed() {
  static const uint32_t seed = [] {
    const char* env = std::getenv("PETREL_TEST_SEED");
    return env ? uint32_t(std::strtoul(env, nullptr, 10)) : std::random_device{}();
  }();
  return seed;
}

std::vector<float> RandomFloats(std::mt19937& gen, size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

// `rows` rows of `n_in` F16 or BF16 elements, each row one element longer than needed and the
// first starting 2 bytes past an aligned address, so that no row is aligned.
struct Weights {
  std::vector<uint8_t> bytes;
  size_t row_bytes = 0;
  const void* data() const { return bytes.data() + 2; }
};

Weights MakeWeights(DType type, size_t rows, size_t n_in, std::mt19937& gen) {
  Weights w;
  w.row_bytes = (n_in + 1) * 2;
  w.bytes.resize(rows * w.row_bytes + 2);
  const std::vector<float> values = RandomFloats(gen, rows * n_in);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t k = 0; k < n_in; ++k) {
      const float v = values[r * n_in + k];
      const uint16_t bits = type == DType::kF16 ? F32ToF16(v) : F32ToBF16(v);
      std::memcpy(w.bytes.data() + 2 + r * w.row_bytes + 2 * k, &bits, 2);
    }
  }
  return w;
}

#define SKIP_WITHOUT_BF16_DOT()                                                   \
  if (!cpu::Bf16DotSupported()) GTEST_SKIP() << "this CPU has no AVX512-BF16"

TEST(Bf16DotTest, MatchesScalarReference) {
  SKIP_WITHOUT_BF16_DOT();
  std::mt19937 gen(TestSeed());
  SCOPED_TRACE(::testing::Message() << "seed " << TestSeed() << " (PETREL_TEST_SEED)");
  for (DType type : {DType::kBF16, DType::kF16}) {
    // Less than, exactly and just past a 32-element block; prompts' k segments (2053, 5632).
    for (size_t n_in : {1, 7, 31, 32, 33, 67, 259, 2053, 5632}) {
      // Single tokens, short batches (spaced rows), prompts (panels, leftover tokens and rows).
      for (size_t n_tokens : {1, 3, 6, 16, 17, 23}) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(type) << " n_in " << n_in << " n_tokens " << n_tokens);
        const size_t rows = n_in > 2048 ? 11 : 71;
        const Weights w = MakeWeights(type, rows, n_in, gen);
        const std::vector<float> x = RandomFloats(gen, n_in * n_tokens + 1);
        const std::vector<float> bias = RandomFloats(gen, rows);
        for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
          std::vector<float> want(rows * n_tokens, -1.0f), got(rows * n_tokens, -2.0f);
          testing::Bf16DotReference(type, w.data(), w.row_bytes, n_in, x.data() + 1, n_in,
                                    n_tokens, b, want.data(), rows, 0, rows);
          // Two row ranges, one starting off a tile's multiple.
          for (auto [begin, end] : {std::pair<size_t, size_t>{0, 5}, {5, rows}}) {
            Bf16Dot().mat_mul(type, w.data(), w.row_bytes, n_in, x.data() + 1, n_in, n_tokens, b,
                              got.data(), rows, begin, end);
          }
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_EQ(want[i], got[i]) << "token " << i / rows << " row " << i % rows;
          }
        }
      }
    }
  }
}

TEST(Bf16DotTest, IsBatchInvariant) {
  SKIP_WITHOUT_BF16_DOT();
  std::mt19937 gen(TestSeed());
  SCOPED_TRACE(::testing::Message() << "seed " << TestSeed() << " (PETREL_TEST_SEED)");
  for (DType type : {DType::kBF16, DType::kF16}) {
    for (size_t n_in : {67, 2048, 5632}) {
      const size_t rows = 101;  // several panels, and rows no panel covers
      const Weights w = MakeWeights(type, rows, n_in, gen);
      const std::vector<float> bias = RandomFloats(gen, rows);
      for (size_t n_tokens : {2, 5, 7, 16, 17, 21, 70}) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(type) << " n_in " << n_in << " n_tokens " << n_tokens);
        const std::vector<float> x = RandomFloats(gen, n_in * n_tokens);
        std::vector<float> split(rows * n_tokens), whole(rows * n_tokens);
        for (auto [begin, end] : {std::pair<size_t, size_t>{0, 5}, {5, 6}, {6, 101}}) {
          Bf16Dot().mat_mul(type, w.data(), w.row_bytes, n_in, x.data(), n_in, n_tokens,
                            bias.data(), split.data(), rows, begin, end);
        }
        Bf16Dot().mat_mul(type, w.data(), w.row_bytes, n_in, x.data(), n_in, n_tokens,
                          bias.data(), whole.data(), rows, 0, rows);
        for (size_t token : {size_t{0}, n_tokens / 2, n_tokens - 1}) {
          std::vector<float> alone(rows);
          Bf16Dot().mat_mul(type, w.data(), w.row_bytes, n_in, x.data() + token * n_in, n_in, 1,
                            bias.data(), alone.data(), rows, 0, rows);
          ASSERT_EQ(0, std::memcmp(alone.data(), split.data() + token * rows, rows * 4))
              << "token " << token;
          ASSERT_EQ(0, std::memcmp(alone.data(), whole.data() + token * rows, rows * 4))
              << "token " << token;
        }
      }
    }
  }
}

// HostBackend's route: activations rounded once per op (activation_type kBF16,
// quantize_activation), then mat_mul_quantized over row ranges: the bits of mat_mul.
TEST(Bf16DotTest, RoundedOncePerOpGivesTheSameBits) {
  SKIP_WITHOUT_BF16_DOT();
  std::mt19937 gen(TestSeed());
  for (DType type : {DType::kBF16, DType::kF16}) {
    ASSERT_EQ(Bf16Dot().activation_type(type), DType::kBF16);
    for (size_t n_in : {33, 2053}) {
      for (size_t n_tokens : {1, 9, 40}) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(type) << " n_in " << n_in << " n_tokens " << n_tokens);
        const size_t rows = 37;
        const Weights w = MakeWeights(type, rows, n_in, gen);
        const std::vector<float> x = RandomFloats(gen, n_in * n_tokens);
        std::vector<uint16_t> xb(n_in * n_tokens);
        for (size_t t = 0; t < n_tokens; ++t) {
          Bf16Dot().quantize_activation(DType::kBF16, x.data() + t * n_in, n_in,
                                        xb.data() + t * n_in);
        }
        std::vector<float> want(rows * n_tokens), got(rows * n_tokens);
        Bf16Dot().mat_mul(type, w.data(), w.row_bytes, n_in, x.data(), n_in, n_tokens, nullptr,
                          want.data(), rows, 0, rows);
        for (auto [begin, end] : {std::pair<size_t, size_t>{0, 16}, {16, rows}}) {
          Bf16Dot().mat_mul_quantized(type, w.data(), w.row_bytes, n_in, xb.data(), n_in * 2,
                                      n_tokens, nullptr, got.data(), rows, begin, end);
        }
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
      }
    }
  }
}

// Only F16 and BF16 change path: the other weight types give the plain table's bits.
TEST(Bf16DotTest, OtherWeightTypesKeepTheirKernels) {
  std::mt19937 gen(TestSeed());
  const size_t rows = 9, n_in = 64, n_tokens = 20;
  const std::vector<float> x = RandomFloats(gen, n_in * n_tokens);
  const std::vector<float> w = RandomFloats(gen, rows * n_in);
  std::vector<float> plain(rows * n_tokens), with_dot(rows * n_tokens);
  cpu::CpuKernels().mat_mul(DType::kF32, w.data(), n_in * 4, n_in, x.data(), n_in, n_tokens,
                            nullptr, plain.data(), rows, 0, rows);
  Bf16Dot().mat_mul(DType::kF32, w.data(), n_in * 4, n_in, x.data(), n_in, n_tokens, nullptr,
                    with_dot.data(), rows, 0, rows);
  EXPECT_EQ(0, std::memcmp(plain.data(), with_dot.data(), plain.size() * 4));
}

// `--bf16-dot auto`'s table (BF16 weights only): BF16 as the `on` table computes it, in both
// of HostBackend's ways (rounding per call, and activations rounded once per op); F16 as the
// plain table, with f32 activations.
TEST(Bf16DotTest, AutoTableTakesBf16WeightsOnly) {
  SKIP_WITHOUT_BF16_DOT();
  std::mt19937 gen(TestSeed());
  SCOPED_TRACE(::testing::Message() << "seed " << TestSeed() << " (PETREL_TEST_SEED)");
  const HostKernels& bf16_only = cpu::CpuKernelsWithBf16Dot(/*f16_too=*/false);
  const size_t rows = 37, n_in = 291, n_tokens = 13;
  const std::vector<float> x = RandomFloats(gen, n_in * n_tokens);
  for (DType type : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(type));
    const Weights w = MakeWeights(type, rows, n_in, gen);
    const HostKernels& expected_table = type == DType::kBF16 ? Bf16Dot() : cpu::CpuKernels();
    std::vector<float> want(rows * n_tokens), got(rows * n_tokens);
    expected_table.mat_mul(type, w.data(), w.row_bytes, n_in, x.data(), n_in, n_tokens, nullptr,
                           want.data(), rows, 0, rows);
    bf16_only.mat_mul(type, w.data(), w.row_bytes, n_in, x.data(), n_in, n_tokens, nullptr,
                      got.data(), rows, 0, rows);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
    const DType act = bf16_only.activation_type(type);
    EXPECT_EQ(act, expected_table.activation_type(type));
    EXPECT_EQ(act, type == DType::kBF16 ? DType::kBF16 : DType::kF32);
    if (act != DType::kBF16) continue;
    std::vector<uint16_t> xb(n_in * n_tokens);
    for (size_t t = 0; t < n_tokens; ++t) {
      bf16_only.quantize_activation(act, x.data() + t * n_in, n_in, xb.data() + t * n_in);
    }
    std::fill(got.begin(), got.end(), 0.0f);
    bf16_only.mat_mul_quantized(type, w.data(), w.row_bytes, n_in, xb.data(), n_in * 2, n_tokens,
                                nullptr, got.data(), rows, 0, rows);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
  }
}

}  // namespace
}  // namespace petrel
