// Block decoders and integer dot products of the few-level formats, as ggml/llama.cpp define
// them; blocks.cuh states the contract. TQ1_0 and TQ2_0: levels -1, 0, +1 times one f16 scale per
// 256 elements (base-3 digits, 2-bit fields); Q1_0: +-d per 128 elements (sign bits); Q2_0:
// (level - 1) d per 64 elements (2-bit fields); MXFP4: 32 E2M1 values times a power of two.
//
// The dots are integer sums (the offset of -1 folded in as minus the activations' sum) times
// one float product.
#pragma once

#include <cstdint>

#include "cuda/matmul/block_common.cuh"  // ActivationBlock, the scalar helpers
#include "quant/blocks.h"                // the block layouts
#include "quant/types.h"                 // DType

namespace petrel::cuda {

// Base-3 digit n (0..4, most significant first) of a TQ1_0 byte, which holds its digits as a
// fraction of 243 scaled to 256: times 3^n (mod 256) brings digit n to the top, and times 3 over
// 256 reads it.
PETREL_HD int TernaryDigit(uint32_t byte, int n) {
  uint32_t power = 1;
  for (int i = 0; i < n; ++i) power *= 3;
  return int(((byte * power) & 0xFF) * 3 >> 8);
}

// TQ1_0: elements 0..159 are digit e / 32 of qs[e % 32]; 160..239 digit (e - 160) / 16 of
// qs[32 + (e - 160) % 16]; 240..255 digit (e - 240) / 4 of qh[(e - 240) % 4].
struct WeightTQ1_0 {
  using Block = quant::BlockTQ1_0;
  static constexpr DType kType = DType::kTQ1_0;
  static constexpr int kSubBlocks = 8;
  // Element e's level, -1..1.
  static PETREL_HD int Level(const Block& b, int e) {
    if (e < 160) return TernaryDigit(b.qs[e % 32], e / 32) - 1;
    if (e < 240) return TernaryDigit(b.qs[32 + (e - 160) % 16], (e - 160) / 16) - 1;
    return TernaryDigit(b.qh[(e - 240) % 4], (e - 240) / 4) - 1;
  }
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float d = HalfToFloat(b.d);
    for (int j = 0; j < 32; ++j) out[j] = float(Level(b, 32 * sub + j)) * d;
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    int sumi = 0;
    for (int w = 0; w < 8; ++w) {
      uint32_t levels = 0;
      for (int i = 0; i < 4; ++i) {
        levels |= uint32_t(uint8_t(int8_t(Level(b, 32 * sub + 4 * w + i)))) << (8 * i);
      }
      sumi = Dp4a(int(levels), ActivationWord(a, 4 * w), sumi);
    }
    return HalfToFloat(b.d) * a.d * float(sumi);
  }
};

// TQ2_0: as Q2_K's planes: sub-block s is bits 2 (s % 4) of bytes 32 (s / 4) .. +32, level + 1.
struct WeightTQ2_0 {
  using Block = quant::BlockTQ2_0;
  static constexpr DType kType = DType::kTQ2_0;
  static constexpr int kSubBlocks = 8;
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float d = HalfToFloat(b.d);
    const uint8_t* q = b.qs + 32 * (sub / 4);
    const int shift = 2 * (sub % 4);
    for (int j = 0; j < 32; ++j) out[j] = float(((q[j] >> shift) & 3) - 1) * d;
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const uint8_t* q = b.qs + 32 * (sub / 4);
    const int shift = 2 * (sub % 4);
    int sumi = 0;
    for (int w = 0; w < 8; ++w) {
      sumi = Dp4a(int((Load32(q + 4 * w) >> shift) & 0x03030303), ActivationWord(a, 4 * w), sumi);
    }
    return HalfToFloat(b.d) * a.d * float(sumi - ActivationSum32(a));
  }
};

// Q1_0: element j of a block is +d where bit j % 8 of qs[j / 8] is set, else -d; sub-block s is
// the 32 bits of qs + 4s.
struct WeightQ1_0 {
  using Block = quant::BlockQ1_0;
  static constexpr DType kType = DType::kQ1_0;
  static constexpr int kSubBlocks = 4;
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float d = HalfToFloat(b.d), neg_d = -d;
    const uint32_t bits = Load32(b.qs + 4 * sub);
    for (int j = 0; j < 32; ++j) out[j] = (bits >> j) & 1 ? d : neg_d;
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const uint32_t bits = Load32(b.qs + 4 * sub);
    int sumi = 0;
    for (int w = 0; w < 8; ++w) {
      const uint32_t nibble = bits >> (4 * w);
      // Bytes +1 where the bit is set, -1 (0xFF) where it is clear.
      const uint32_t signs = SpreadBits(nibble) | ByteMask(~nibble);
      sumi = Dp4a(int(signs), ActivationWord(a, 4 * w), sumi);
    }
    return HalfToFloat(b.d) * a.d * float(sumi);
  }
};

// Q2_0: element j of a block is bits 2 (j % 4) of qs[j / 4], level + 1; sub-block s is the bytes
// qs + 8s .. +8, four elements each.
struct WeightQ2_0 {
  using Block = quant::BlockQ2_0;
  static constexpr DType kType = DType::kQ2_0;
  static constexpr int kSubBlocks = 2;
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float d = HalfToFloat(b.d);
    const uint8_t* q = b.qs + 8 * sub;
    for (int j = 0; j < 32; ++j) out[j] = float(int((q[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const uint8_t* q = b.qs + 8 * sub;
    int sumi = 0;
    for (int w = 0; w < 8; ++w) {
      const uint32_t byte = q[w];
      const uint32_t fields =
          (byte & 3) | ((byte & 0x0C) << 6) | ((byte & 0x30) << 12) | ((byte & 0xC0) << 18);
      sumi = Dp4a(int(fields), ActivationWord(a, 4 * w), sumi);
    }
    return HalfToFloat(b.d) * a.d * float(sumi - ActivationSum32(a));
  }
};

// The E2M1 values of MXFP4, doubled (quant::kMXFP4Values), packed for PackedNibbleValue.
constexpr uint64_t kMXFP4Low = 0x0C'08'06'04'03'02'01'00ull;   // 0 1 2 3 4 6 8 12
constexpr uint64_t kMXFP4High = 0xF4'F8'FA'FC'FD'FE'FF'00ull;  // 0 -1 -2 -3 -4 -6 -8 -12

// Half the E8M0 scale 2^(e - 127), matching the doubled values: 2^(e - 128), subnormal for e < 2.
PETREL_HD float E8M0HalfToFloat(uint32_t e) {
  return BitsToFloat(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

// MXFP4: Q4_0's nibble order through the E2M1 grid. Blocks are 17 bytes, so `qs` is read a byte
// at a time.
struct WeightMXFP4 {
  using Block = quant::BlockMXFP4;
  static constexpr DType kType = DType::kMXFP4;
  static constexpr int kSubBlocks = 1;
  static PETREL_HD void Decode(const Block& b, int /*sub*/, float* out) {
    const float d = E8M0HalfToFloat(b.e);
    for (int j = 0; j < 16; ++j) {
      out[j] = float(PackedNibbleValue<kMXFP4Low, kMXFP4High>(b.qs[j] & 0xF)) * d;
      out[j + 16] = float(PackedNibbleValue<kMXFP4Low, kMXFP4High>(b.qs[j] >> 4)) * d;
    }
  }
  static PETREL_HD float Dot(const Block& b, int /*sub*/, const ActivationBlock& a) {
    int sumi = 0;
    for (int w = 0; w < 4; ++w) {
      const uint32_t q = Load32Bytes(b.qs + 4 * w);
      sumi = Dp4a(PackedNibbleWord<kMXFP4Low, kMXFP4High>(q, 0), ActivationWord(a, 4 * w), sumi);
      sumi =
          Dp4a(PackedNibbleWord<kMXFP4Low, kMXFP4High>(q, 4), ActivationWord(a, 16 + 4 * w), sumi);
    }
    return E8M0HalfToFloat(b.e) * a.d * float(sumi);
  }
};

}  // namespace petrel::cuda
