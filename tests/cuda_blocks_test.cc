// The arithmetic of the CUDA weight kernels, run on the host: every block decoder of
// cuda/matmul/blocks.cuh against src/quant's dequantizers (bit for bit), the activation
// quantizer against its definition, and every integer block dot product against the f32 dot of
// the decoded values. Needs no CUDA toolkit and no GPU.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/matmul/blocks.cuh"
#include "gtest/gtest.h"
#include "quant/f16.h"
#include "quant/quantize.h"
#include "quant/types.h"

namespace petrel::cuda {
namespace {

constexpr int kBlocksPerType = 200;

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// A random non-zero f16 scale of magnitude 2^-12 .. 2^-2 (either sign when `signed_scale`): small
// enough that no product overflows, varied enough to exercise the f16 exponent.
uint16_t RandomScale(std::mt19937& rng, bool signed_scale) {
  std::uniform_real_distribution<float> exponent(-12.f, -2.f);
  float value = std::exp2(exponent(rng));
  if (signed_scale && (rng() & 1)) value = -value;
  return F32ToF16(value);
}

// A block of random bytes with valid, non-zero scales.
template <class Weight>
typename Weight::Block RandomBlock(std::mt19937& rng) {
  typename Weight::Block block;
  auto* bytes = reinterpret_cast<uint8_t*>(&block);
  for (size_t i = 0; i < sizeof(block); ++i) bytes[i] = uint8_t(rng());
  block.d = RandomScale(rng, /*signed_scale=*/true);
  if constexpr (requires { block.dmin; }) block.dmin = RandomScale(rng, /*signed_scale=*/false);
  if constexpr (requires { block.m; }) block.m = RandomScale(rng, /*signed_scale=*/true);
  return block;
}

// Calls test(WeightX{}) for every block type, with the type's name as the trace.
template <class Test>
void ForEachBlockType(Test&& test) {
  const DType types[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,   DType::kQ5_1,
                         DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,   DType::kQ4_K,
                         DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};
  for (DType type : types) {
    SCOPED_TRACE(DTypeName(type));
    ASSERT_TRUE(VisitBlockType(type, test));
  }
}

TEST(CudaBlocksTest, EveryBlockTypeIsVisitedAsItself) {
  ForEachBlockType([](auto weight) {
    using Weight = decltype(weight);
    EXPECT_EQ(sizeof(typename Weight::Block), Traits(Weight::kType).block_bytes);
    EXPECT_EQ(size_t(Weight::kSubBlocks * kSubBlockElems), Traits(Weight::kType).block_elems);
  });
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_1, DType::kQ8_K}) {
    EXPECT_FALSE(VisitBlockType(type, [](auto) {})) << DTypeName(type);
  }
}

TEST(CudaBlocksTest, DecodersMatchTheDequantizersBitForBit) {
  std::mt19937 rng(20);
  ForEachBlockType([&](auto weight) {
    using Weight = decltype(weight);
    constexpr int kElems = Weight::kSubBlocks * kSubBlockElems;
    int mismatches = 0;
    for (int i = 0; i < kBlocksPerType; ++i) {
      const typename Weight::Block block = RandomBlock<Weight>(rng);
      float expected[kElems], decoded[kElems];
      ASSERT_TRUE(DequantizeRow(Weight::kType, &block, expected, kElems));
      for (int sub = 0; sub < Weight::kSubBlocks; ++sub) {
        Weight::Decode(block, sub, decoded + sub * kSubBlockElems);
      }
      for (int j = 0; j < kElems; ++j) {
        if (FloatBits(decoded[j]) != FloatBits(expected[j]) && ++mismatches <= 3) {
          ADD_FAILURE() << "block " << i << " element " << j << ": decoded " << decoded[j]
                        << ", dequantizer " << expected[j];
        }
      }
    }
    EXPECT_EQ(mismatches, 0);
  });
}

TEST(CudaBlocksTest, FloatLoadsMatchTheConverters) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  for (uint32_t i = 0; i < all.size(); ++i) {
    const float f16 = WeightF16::Load(all.data(), i), bf16 = WeightBF16::Load(all.data(), i);
    if (std::isnan(F16ToF32(all[i]))) {
      EXPECT_TRUE(std::isnan(f16)) << i;
    } else {
      EXPECT_EQ(FloatBits(f16), FloatBits(F16ToF32(all[i]))) << i;
    }
    EXPECT_EQ(FloatBits(bf16), FloatBits(BF16ToF32(all[i]))) << i;
  }
  const float values[] = {1.5f, -0.f, 3e-39f};
  for (int j = 0; j < 3; ++j)
    EXPECT_EQ(FloatBits(WeightF32::Load(values, j)), FloatBits(values[j]));
}

TEST(CudaBlocksTest, EightAtATimeLoadsMatchElementLoads) {
  std::mt19937 rng(16);
  alignas(16) uint16_t halves[64];
  alignas(16) float floats[64];
  for (uint16_t& h : halves) h = uint16_t(rng() & 0x7BFF);  // finite
  for (float& f : floats) f = std::ldexp(float(int(rng() % 2001) - 1000), -int(rng() % 20));
  for (int j = 0; j < 64; j += 8) {
    float f16[8], bf16[8], f32[8];
    WeightF16::Load8(halves, j, f16);
    WeightBF16::Load8(halves, j, bf16);
    WeightF32::Load8(floats, j, f32);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(FloatBits(f16[i]), FloatBits(WeightF16::Load(halves, j + i))) << j + i;
      EXPECT_EQ(FloatBits(bf16[i]), FloatBits(WeightBF16::Load(halves, j + i))) << j + i;
      EXPECT_EQ(FloatBits(f32[i]), FloatBits(floats[j + i])) << j + i;
    }
  }
}

TEST(CudaBlocksTest, IQ4NLGridMatchesTheTable) {
  for (int i = 0; i < 16; ++i) EXPECT_EQ(IQ4NLValue(i), quant::kIQ4NLValues[i]) << i;
}

TEST(CudaBlocksTest, Dp4aIsTheSignedByteDotProduct) {
  std::mt19937 rng(4);
  for (int i = 0; i < 1000; ++i) {
    const int a = int(rng()), b = int(rng()), acc = int(rng() % 100000);
    int expected = acc;
    for (int k = 0; k < 4; ++k) expected += int8_t(a >> (8 * k)) * int8_t(b >> (8 * k));
    EXPECT_EQ(Dp4a(a, b, acc), expected);
  }
  EXPECT_EQ(Dp4a(int(0x80808080u), int(0x80808080u), 0), 4 * 128 * 128);
}

// The definition: d = max|x| / 127; q = x / d rounded to nearest, so |q| <= 127
// and the largest reaches 127; s = d * sum(q); an all-zero block gives d = 0 and q = 0.
TEST(CudaBlocksTest, ActivationQuantizerMatchesItsDefinition) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> uniform(-3.f, 3.f);
  for (int i = 0; i < 1000; ++i) {
    float x[kSubBlockElems];
    const float range = std::exp2(float(int(rng() % 40)) - 20.f);
    for (float& v : x) v = uniform(rng) * range;
    if (i % 7 == 0) x[rng() % kSubBlockElems] = 0.f;
    ActivationBlock act;
    QuantizeActivationBlock(x, &act);
    float amax = 0.f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    ASSERT_EQ(act.d, amax / 127.f);
    int sum = 0, qmax = 0;
    for (int j = 0; j < kSubBlockElems; ++j) {
      const int q = act.qs[j];
      EXPECT_LE(std::fabs(x[j] - act.d * float(q)), act.d * (0.5f + 1e-5f)) << i << " " << j;
      sum += q;
      qmax = std::max(qmax, std::abs(q));
    }
    EXPECT_EQ(qmax, 127);
    EXPECT_EQ(act.s, act.d * float(sum));
  }
  float zeros[kSubBlockElems] = {};
  ActivationBlock act;
  QuantizeActivationBlock(zeros, &act);
  EXPECT_EQ(act.d, 0.f);
  EXPECT_EQ(act.s, 0.f);
  for (int8_t q : act.qs) EXPECT_EQ(q, 0);
}

// Dot(block, sub, act) against sum(w * a) in double, with w the dequantized weights and a = d * q
// the dequantized activations: they differ only by the float roundings of the scale products, so
// the tolerance is 1e-5 * max|w| * sum|a| (a wrong bit or nibble is off by far more).
TEST(CudaBlocksTest, IntegerDotsMatchTheFloatDotOfTheDecodedValues) {
  std::mt19937 rng(32);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  ForEachBlockType([&](auto weight) {
    using Weight = decltype(weight);
    constexpr int kElems = Weight::kSubBlocks * kSubBlockElems;
    int failures = 0;
    for (int i = 0; i < kBlocksPerType; ++i) {
      const typename Weight::Block block = RandomBlock<Weight>(rng);
      float w[kElems];
      ASSERT_TRUE(DequantizeRow(Weight::kType, &block, w, kElems));
      for (int sub = 0; sub < Weight::kSubBlocks; ++sub) {
        float x[kSubBlockElems];
        for (float& v : x) v = uniform(rng);
        ActivationBlock act;
        QuantizeActivationBlock(x, &act);
        double expected = 0, max_w = 0, sum_a = 0;
        for (int j = 0; j < kSubBlockElems; ++j) {
          const double a = double(act.d) * act.qs[j];
          expected += double(w[sub * kSubBlockElems + j]) * a;
          max_w = std::max(max_w, std::fabs(double(w[sub * kSubBlockElems + j])));
          sum_a += std::fabs(a);
        }
        const double dot = Weight::Dot(block, sub, act);
        if (std::fabs(dot - expected) > 1e-5 * max_w * sum_a && ++failures <= 3) {
          ADD_FAILURE() << "block " << i << " sub-block " << sub << ": integer dot " << dot
                        << ", float dot " << expected;
        }
      }
    }
    EXPECT_EQ(failures, 0);
  });
}

}  // namespace
}  // namespace petrel::cuda
