// The CPU backend's quantized mat_mul against the reference, for every weight format of the
// mat_mul table (random valid blocks for the formats without a quantizer) and every Highway
// target this machine supports: exactly the math of the blocks (weights and quantized
// activations dequantized, dotted in double) to float rounding, the exact-f32 `ref` path within
// the activation-rounding error, batch invariance, and the same bits on every x86 target with
// FMA (the AVX512-VNNI dot step included).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "cpu/matmul/int8_target.h"  // Int8KernelTarget
#include "cpu/kernels.h"
#include "cpu/matmul/matmul_table.h"  // FindMatMulKernel, MatMulDriver
#include "hwy/targets.h"  // SupportedAndGeneratedTargets, SetSupportedTargetsForTest, TargetName
#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/quantize.h"
#include "ref/reference_kernels.h"
#include "util/random_weights.h"  // RandomWeightRow, RandomBlocks

namespace petrel {
namespace {

const HostKernels& Cpu() { return cpu::CpuKernels(); }

uint32_t TestSeed() {
  static const uint32_t seed = [] {
    const char* env = std::getenv("PETREL_TEST_SEED");
    return env ? uint32_t(std::strtoul(env, nullptr, 10)) : std::random_device{}();
  }();
  return seed;
}

template <class Body>
void ForEachTarget(const Body& body) {
  // Caps dispatch at each target as PETREL_CPU_TARGET does: every kernel runs its best target
  // at or below it (AVX3_DL is compiled only for the integer mat_muls; the rest run AVX3 then).
  const int64_t supported = hwy::SupportedTargets();
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(supported & ~(target - 1));
    SCOPED_TRACE(::testing::Message() << "target " << hwy::TargetName(target) << ", seed "
                                      << TestSeed() << " (PETREL_TEST_SEED)");
    body();
    if (::testing::Test::HasFailure()) break;
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Every weight format the mat_mul table gives an integer kernel.
std::vector<DType> QuantWeightTypes() {
  std::vector<DType> types;
  for (const cpu::MatMulKernel& kernel : cpu::kMatMulKernels) {
    if (kernel.activation != DType::kF32) types.push_back(kernel.weight);
  }
  return types;
}
const std::vector<DType> kWeightTypes = QuantWeightTypes();

struct Problem {
  DType type;
  size_t n_in, n_rows, n_tokens;
  size_t row_bytes, xq_row_bytes;
  DType act_type;
  std::vector<uint8_t> w;   // (n_rows, row_bytes)
  std::vector<float> x;     // (n_tokens, n_in)
  std::vector<uint8_t> xq;  // (n_tokens, xq_row_bytes)
  std::vector<float> bias;  // (n_rows)
};

Problem MakeProblem(DType type, size_t n_blocks, size_t n_rows, size_t n_tokens,
                    std::mt19937& rng) {
  Problem p;
  p.type = type;
  p.n_in = n_blocks * Traits(type).block_elems;
  p.n_rows = n_rows;
  p.n_tokens = n_tokens;
  p.row_bytes = *RowBytes(type, p.n_in);
  p.act_type = Cpu().activation_type(type);
  p.xq_row_bytes = *RowBytes(p.act_type, p.n_in);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p.w.resize(n_rows * p.row_bytes);
  for (size_t r = 0; r < n_rows; ++r) {
    // Odd rows of the formats with random blocks are random bytes even where the format has a
    // quantizer: every bit pattern of the levels, not only those the quantizer writes.
    uint8_t* w_row = p.w.data() + r * p.row_bytes;
    if (r % 2 == 1 && test::FindRandomBlockScale(type) != nullptr) {
      EXPECT_TRUE(test::RandomBlocks(type, p.n_in, rng, w_row));
    } else {
      EXPECT_TRUE(test::RandomWeightRow(type, p.n_in, rng, w_row));
    }
  }
  p.x.resize(n_tokens * p.n_in);
  for (float& v : p.x) v = normal(rng);
  p.xq.resize(n_tokens * p.xq_row_bytes);
  for (size_t t = 0; t < n_tokens; ++t) {
    Cpu().quantize_activation(p.act_type, p.x.data() + t * p.n_in, p.n_in,
                              p.xq.data() + t * p.xq_row_bytes);
  }
  p.bias.resize(n_rows);
  for (float& v : p.bias) v = normal(rng);
  return p;
}

// Dequantized weights dotted with dequantized activations, in double: what the integer kernel
// computes up to float rounding.
std::vector<double> QuantizedReference(const Problem& p) {
  std::vector<double> out(p.n_tokens * p.n_rows);
  std::vector<float> w(p.n_in), x(p.n_in);
  for (size_t t = 0; t < p.n_tokens; ++t) {
    EXPECT_TRUE(DequantizeRow(p.act_type, p.xq.data() + t * p.xq_row_bytes, x.data(), p.n_in));
    for (size_t r = 0; r < p.n_rows; ++r) {
      EXPECT_TRUE(DequantizeRow(p.type, p.w.data() + r * p.row_bytes, w.data(), p.n_in));
      double sum = 0;
      for (size_t i = 0; i < p.n_in; ++i) sum += double(w[i]) * x[i];
      if (p.act_type == DType::kQ8_1) {
        // Q4_1/Q5_1 (as ggml): the min multiplies the block sum Q8_1 stores, f16(d * sum(q)),
        // rather than the sum of the dequantized activations.
        const auto* xb =
            reinterpret_cast<const quant::BlockQ8_1*>(p.xq.data() + t * p.xq_row_bytes);
        const uint8_t* w_row = p.w.data() + r * p.row_bytes;
        const size_t w_block_bytes = Traits(p.type).block_bytes;
        for (size_t b = 0; b < p.n_in / 32; ++b) {
          uint16_t m_bits;  // the min follows the f16 scale in both Q4_1 and Q5_1
          std::memcpy(&m_bits, w_row + b * w_block_bytes + 2, 2);
          double x_sum = 0;
          for (size_t i = 0; i < 32; ++i) x_sum += x[b * 32 + i];
          sum += double(F16ToF32(m_bits)) * (double(F16ToF32(xb[b].s)) - x_sum);
        }
      }
      out[t * p.n_rows + r] = sum + p.bias[r];
    }
  }
  return out;
}

TEST(QuantKernelsTest, ActivationQuantizerEqualsReference) {
  std::mt19937 rng(TestSeed());
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (DType act : {DType::kQ8_0, DType::kQ8_1, DType::kQ8_K}) {
    std::vector<float> x(512);
    for (float& v : x) v = normal(rng);
    x[7] = 0.5f * 127 / 3;  // exact halves exercise the rounding mode
    std::vector<uint8_t> ours(*RowBytes(act, 512)), ref(ours.size());
    Cpu().quantize_activation(act, x.data(), x.size(), ours.data());
    ASSERT_TRUE(QuantizeRow(act, x.data(), ref.data(), x.size()));
    EXPECT_EQ(ours, ref) << DTypeName(act);
  }
}

TEST(QuantKernelsTest, MatchesBlockMathOnEveryTarget) {
  std::mt19937 rng(TestSeed());
  for (DType type : kWeightTypes) {
    SCOPED_TRACE(DTypeName(type));
    const bool k_quant = Traits(type).block_elems >= 128;
    // Block counts: 1, odd, and the 288- and 768-wide rows of synth-tiny; tokens 1..11 cover the
    // tiles (4 or 8 tokens) and their tails, 70 a chunk of 64 and its tail; row counts below
    // and above a group of 8, with a tail.
    struct Shape {
      size_t n_tokens, n_rows;
    };
    for (size_t n_blocks : k_quant ? std::vector<size_t>{1, 3} : std::vector<size_t>{1, 3, 9, 24}) {
      for (Shape shape : {Shape{1, 7}, Shape{4, 7}, Shape{6, 7}, Shape{1, 19}, Shape{11, 19},
                          Shape{70, 3}}) {
        const size_t n_tokens = shape.n_tokens;
        Problem p = MakeProblem(type, n_blocks, shape.n_rows, n_tokens, rng);
        const std::vector<double> want = QuantizedReference(p);
        ForEachTarget([&] {
          std::vector<float> out(n_tokens * p.n_rows, NAN);
          Cpu().mat_mul_quantized(type, p.w.data(), p.row_bytes, p.n_in, p.xq.data(),
                                  p.xq_row_bytes, n_tokens, p.bias.data(), out.data(), p.n_rows, 0,
                                  p.n_rows);
          for (size_t i = 0; i < out.size(); ++i) {
            // int32 sums are exact; the float scaling and lane sums round at ~1e-6 relative.
            const double tol = 1e-5 * (std::fabs(want[i]) + std::sqrt(double(p.n_in)));
            ASSERT_NEAR(out[i], want[i], tol)
                << "n_in " << p.n_in << " tokens " << n_tokens << " index " << i;
          }
        });
      }
    }
  }
}

TEST(QuantKernelsTest, CloseToExactF32Path) {
  std::mt19937 rng(TestSeed());
  for (DType type : kWeightTypes) {
    SCOPED_TRACE(DTypeName(type));
    Problem p = MakeProblem(type, Traits(type).block_elems == 256 ? 2 : 16, 5, 3, rng);
    std::vector<float> fast(p.n_tokens * p.n_rows), exact(fast.size());
    Cpu().mat_mul(type, p.w.data(), p.row_bytes, p.n_in, p.x.data(), p.n_in, p.n_tokens,
                  p.bias.data(), fast.data(), p.n_rows, 0, p.n_rows);
    ref::ReferenceKernels().mat_mul(type, p.w.data(), p.row_bytes, p.n_in, p.x.data(), p.n_in,
                                    p.n_tokens, p.bias.data(), exact.data(), p.n_rows, 0, p.n_rows);
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < fast.size(); ++i) {
      diff2 += double(fast[i] - exact[i]) * (fast[i] - exact[i]);
      ref2 += double(exact[i] - p.bias[i % p.n_rows]) * (exact[i] - p.bias[i % p.n_rows]);
    }
    // 8-bit activations: ~0.5 % of each product's size on N(0, 1) data; a wrong block decoder
    // would be off by the size of the dot itself.
    EXPECT_LT(std::sqrt(diff2 / ref2), 0.03);
  }
}

TEST(QuantKernelsTest, BatchAndSplitInvariant) {
  std::mt19937 rng(TestSeed());
  // 2, 3, 4: the short batches that share the single token's row streams (LaneShortMatMul);
  // 6, 11: whole 4-token tiles and every count of leftover tokens; 16: whole tiles only.
  for (DType type : kWeightTypes) {
    for (size_t n_tokens : std::initializer_list<size_t>{2, 3, 4, 6, 11, 16}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(type) << ", " << n_tokens << " tokens");
      Problem p = MakeProblem(type, Traits(type).block_elems == 256 ? 2 : 9, 21, n_tokens, rng);
      ForEachTarget([&] {
        std::vector<float> batched(p.n_tokens * p.n_rows), alone(p.n_rows);
        // Rows in uneven ranges (groups of 8 and tails), all tokens at once.
        for (auto [begin, end] : {std::pair<size_t, size_t>{0, 4}, {4, 17}, {17, 21}}) {
          Cpu().mat_mul(type, p.w.data(), p.row_bytes, p.n_in, p.x.data(), p.n_in, p.n_tokens,
                        nullptr, batched.data(), p.n_rows, begin, end);
        }
        for (size_t t = 0; t < p.n_tokens; ++t) {
          Cpu().mat_mul(type, p.w.data(), p.row_bytes, p.n_in, p.x.data() + t * p.n_in, p.n_in, 1,
                        nullptr, alone.data(), p.n_rows, 0, p.n_rows);
          for (size_t r = 0; r < p.n_rows; ++r) ASSERT_EQ(alone[r], batched[t * p.n_rows + r]);
        }
      });
    }
  }
}

// The rows-in-lanes and pair-per-block kernels compute exact int32 block dots and then the same
// float operations per row whatever the vector width, dot instruction or decoder (vpdpbusd, the
// VBMI codebook permutes), so AVX2, AVX3 and AVX3_DL agree bit for bit; and each of those targets
// is the one the integer kernels dispatch to.
TEST(QuantKernelsTest, FmaTargetsAgreeBitForBit) {
  const int64_t kFmaTargets = HWY_AVX3_DL | HWY_AVX3 | HWY_AVX2;
  std::vector<int64_t> targets;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    if (target & kFmaTargets) targets.push_back(target);
  }
  if (targets.size() < 2) GTEST_SKIP() << "fewer than two of AVX2, AVX3, AVX3_DL on this CPU";
  std::mt19937 rng(TestSeed());
  const int64_t supported = hwy::SupportedTargets();
  for (DType type : kWeightTypes) {
    const cpu::MatMulDriver driver = cpu::FindMatMulKernel(type)->driver;
    if (driver != cpu::MatMulDriver::kRowsInLanes && driver != cpu::MatMulDriver::kPairPerBlock) {
      continue;
    }
    for (size_t n_tokens : std::initializer_list<size_t>{1, 2, 4, 5, 16}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(type) << ", " << n_tokens << " tokens, seed "
                                        << TestSeed() << " (PETREL_TEST_SEED)");
      Problem p = MakeProblem(type, Traits(type).block_elems == 256 ? 3 : 9, 37, n_tokens, rng);
      std::vector<float> first;
      for (int64_t target : targets) {
        SCOPED_TRACE(hwy::TargetName(target));
        hwy::SetSupportedTargetsForTest(supported & ~(target - 1));
        EXPECT_EQ(cpu::Int8KernelTarget(), target);
        std::vector<float> out(n_tokens * p.n_rows, NAN);
        Cpu().mat_mul_quantized(type, p.w.data(), p.row_bytes, p.n_in, p.xq.data(), p.xq_row_bytes,
                                n_tokens, p.bias.data(), out.data(), p.n_rows, 0, p.n_rows);
        if (first.empty()) {
          first = out;
          continue;
        }
        ASSERT_EQ(std::memcmp(out.data(), first.data(), out.size() * sizeof(float)), 0)
            << "differs from " << hwy::TargetName(targets[0]);
      }
      hwy::SetSupportedTargetsForTest(0);
    }
  }
}

}  // namespace
}  // namespace petrel
