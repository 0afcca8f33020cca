// The arithmetic of the CUDA weight kernels, run on the host: every block decoder of
// cuda/matmul/blocks.cuh against src/quant's dequantizers (bit for bit), the activation
// quantizer against its definition, and every integer block dot product against the f32 dot of
// the decoded values. Needs no CUDA toolkit and no GPU.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "cuda/matmul/blocks.cuh"
#include "gtest/gtest.h"
#include "quant/f16.h"
#include "quant/iq_grids.h"
#include "quant/quantize.h"
#include "quant/types.h"
#include "util/random_blocks.h"

namespace petrel::cuda {
namespace {

constexpr int kBlocksPerType = 200;

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// Every block type of the device, named here so that a type added to BlockWeights without being
// added here fails EveryBlockTypeIsVisitedAsItself.
constexpr DType kBlockTypes[] = {
    DType::kQ4_0,  DType::kQ4_1,  DType::kQ5_0,    DType::kQ5_1,   DType::kQ8_0,   DType::kQ2_K,
    DType::kQ3_K,  DType::kQ4_K,  DType::kQ5_K,    DType::kQ6_K,   DType::kIQ4_NL, DType::kIQ4_XS,
    DType::kIQ1_S, DType::kIQ1_M, DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S,  DType::kIQ3_XXS,
    DType::kIQ3_S, DType::kTQ1_0, DType::kTQ2_0,   DType::kMXFP4,  DType::kQ1_0,   DType::kQ2_0};

// Calls test(WeightX{}) for every block type, with the type's name as the trace.
template <class Test>
void ForEachBlockType(Test&& test) {
  for (DType type : kBlockTypes) {
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
  int n_visited = 0;
  for (int i = 0; i < int(DType::kCount); ++i) n_visited += VisitBlockType(DType(i), [](auto) {});
  EXPECT_EQ(n_visited, int(std::size(kBlockTypes)));
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

// Every E8M0 exponent, subnormal and overflowing scales included, decodes as the dequantizer does.
TEST(CudaBlocksTest, MXFP4ScaleCoversEveryExponent) {
  std::mt19937 rng(17);
  int mismatches = 0;
  for (int e = 0; e < 256; ++e) {
    quant::BlockMXFP4 block = RandomBlock<WeightMXFP4>(rng);
    block.e = uint8_t(e);
    float expected[kSubBlockElems], decoded[kSubBlockElems];
    ASSERT_TRUE(DequantizeRow(DType::kMXFP4, &block, expected, kSubBlockElems));
    WeightMXFP4::Decode(block, 0, decoded);
    for (int j = 0; j < kSubBlockElems; ++j) {
      if (FloatBits(decoded[j]) != FloatBits(expected[j]) && ++mismatches <= 3) {
        ADD_FAILURE() << "e " << e << " element " << j << ": decoded " << decoded[j]
                      << ", dequantizer " << expected[j];
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// The codebooks the decoders read on the host are the quant layer's; the device's are built from
// the same values (iq_grids.cuh), and every entry is reached through its accessor here.
TEST(CudaBlocksTest, CodebookAccessorsReadTheCodebooks) {
  for (int i = 0; i < 256; ++i) EXPECT_EQ(IQ2XXSGrid(i), quant::kIQ2XXSGrid[i]) << i;
  for (int i = 0; i < 512; ++i) EXPECT_EQ(IQ2XSGrid(i), quant::kIQ2XSGrid[i]) << i;
  for (int i = 0; i < 1024; ++i) EXPECT_EQ(IQ2SGrid(i), quant::kIQ2SGrid[i]) << i;
  for (int i = 0; i < 256; ++i) EXPECT_EQ(IQ3XXSGrid(i), quant::kIQ3XXSGrid[i]) << i;
  for (int i = 0; i < 512; ++i) EXPECT_EQ(IQ3SGrid(i), quant::kIQ3SGrid[i]) << i;
  for (int i = 0; i < 2048; ++i) EXPECT_EQ(IQ1SGrid(i), quant::kIQ1SGrid[i]) << i;
}

// The device computes IQ2/IQ3's eighth sign bit with a population count; the host reads
// quant::IQ2Signs. Both are the parity of the seven stored bits.
TEST(CudaBlocksTest, IQSignByteMakesTheNegativesEven) {
  for (uint32_t seven = 0; seven < 128; ++seven) {
    const uint32_t signs = IQSignByte(seven);
    EXPECT_EQ(signs & 127, seven);
    EXPECT_EQ(__builtin_popcount(signs) % 2, 0) << seven;
  }
}

TEST(CudaBlocksTest, ByteHelpersMatchTheirDefinitions) {
  std::mt19937 rng(12);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t bytes = uint32_t(rng()) & 0x7F7F7F7F, bits = uint32_t(rng()) & 0xF;
    const uint32_t mask = ByteMask(bits), spread = SpreadBits(bits);
    const uint32_t negated = uint32_t(NegateBytes(bytes, mask));
    for (int k = 0; k < 4; ++k) {
      const bool set = (bits >> k) & 1;
      EXPECT_EQ((spread >> (8 * k)) & 0xFF, set ? 1u : 0u);
      EXPECT_EQ((mask >> (8 * k)) & 0xFF, set ? 0xFFu : 0u);
      const int8_t value = int8_t(bytes >> (8 * k));
      EXPECT_EQ(int8_t(negated >> (8 * k)), set ? -value : value);
    }
  }
  const uint8_t odd[5] = {0x11, 0x22, 0x33, 0x44, 0x55};
  EXPECT_EQ(Load32Bytes(odd + 1), 0x55443322u);
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

TEST(CudaBlocksTest, PackedGridsMatchTheTables) {
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(IQ4NLValue(i), quant::kIQ4NLValues[i]) << i;
    EXPECT_EQ((PackedNibbleValue<kMXFP4Low, kMXFP4High>(i)), quant::kMXFP4Values[i]) << i;
  }
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
