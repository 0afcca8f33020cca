// Block decoders and 8-bit integer dot products for every weight type the CUDA kernels run,
// compiled for the device by nvcc and for the host by the C++ compiler, so that their arithmetic
// is tested on machines without a GPU (tests/cuda_blocks_test.cc).
//
// Every block type is seen as sub-blocks of 32 elements (1 per block for the 32-element formats,
// 2 for Q2_0, 4 for Q1_0, 8 per 256-element super-block). Per sub-block a type has:
//   Decode(block, sub, out)  out (32) = the f32 values, bit for bit those of src/quant's
//                            dequantizers (the same operations in the same order; on the device
//                            the products that feed a sum are rounded on their own, so nvcc
//                            cannot fuse them into an FMA);
//   Dot(block, sub, act)     sum over the 32 elements of weight times activation, where the
//                            activations are an ActivationBlock (int8 values + scale + sum): the
//                            products are integer (dp4a on the device), the scales applied last.
// This file has the scalar formats, the K-quants and IQ4; iq_blocks.cuh the codebook formats
// (IQ1-IQ3), lowbit_blocks.cuh the few-level ones (TQ1_0, TQ2_0, Q1_0, Q2_0, MXFP4); the list of
// them all, BlockWeights, is here. No CUDA header is needed by the host compiler.
#pragma once

#include "cuda/matmul/block_common.cuh"   // ActivationBlock, the scalar helpers
#include "cuda/matmul/iq_blocks.cuh"      // WeightIQ1_S .. WeightIQ3_S
#include "cuda/matmul/lowbit_blocks.cuh"  // WeightTQ1_0 .. WeightMXFP4
#include "quant/blocks.h"                 // the block layouts
#include "quant/types.h"                  // DType

namespace petrel::cuda {

// The IQ4_NL grid, packed for PackedNibbleValue.
constexpr uint64_t kIQ4NLLow = 0xF6'EA'DD'CF'BF'AD'98'81ull;   // -127 -104 -83 -65 -49 -35 -22 -10
constexpr uint64_t kIQ4NLHigh = 0x71'59'45'35'26'19'0D'01ull;  // 1 13 25 38 53 69 89 113

PETREL_HD int IQ4NLValue(int index) { return PackedNibbleValue<kIQ4NLLow, kIQ4NLHigh>(index); }

// Four nibbles (the low ones of `word`'s bytes, after `shift`) mapped through the IQ4_NL grid.
PETREL_HD int IQ4NLWord(uint32_t word, int shift) {
  return PackedNibbleWord<kIQ4NLLow, kIQ4NLHigh>(word, shift);
}

// Scale and min (6 bits each) of sub-block j of a Q4_K/Q5_K super-block; quant::ScaleMinK4.
PETREL_HD void ScaleMinK4(int j, const uint8_t* scales, int* scale, int* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// Signed 6-bit scale j (0..15) of a Q3_K super-block; quant::UnpackQ3KScales.
PETREL_HD int Q3KScale(const uint8_t* packed, int j) {
  const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
  const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Signed 6-bit scale of sub-block ib of an IQ4_XS super-block; quant::IQ4XSScale.
PETREL_HD int IQ4XSScale(const quant::BlockIQ4_XS& block, int ib) {
  const int low = (block.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
  const int high = (block.scales_h >> (2 * ib)) & 3;
  return (low | (high << 4)) - 32;
}

// The fifth bits of elements first..first+3 (bits of `qh`) at bit 4 of each byte.
PETREL_HD uint32_t FifthBits(uint32_t qh, int first) {
  uint32_t bits = 0;
  for (int i = 0; i < 4; ++i) bits |= ((qh >> (first + i)) & 1u) << (8 * i + 4);
  return bits;
}

// ---- The 32-element formats: one sub-block per block ----

struct WeightQ4_0 {
  using Block = quant::BlockQ4_0;
  static constexpr DType kType = DType::kQ4_0;
  static constexpr int kSubBlocks = 1;
  static PETREL_HD void Decode(const Block& b, int /*sub*/, float* out) {
    const float d = HalfToFloat(b.d);
    for (int j = 0; j < 16; ++j) {
      out[j] = float((b.qs[j] & 0x0F) - 8) * d;
      out[j + 16] = float((b.qs[j] >> 4) - 8) * d;
    }
  }
  static PETREL_HD float Dot(const Block& b, int /*sub*/, const ActivationBlock& a) {
    int sumi = 0;
    for (int w = 0; w < 4; ++w) {
      const uint32_t q = Load32(b.qs + 4 * w);
      sumi = Dp4a(int(q & 0x0F0F0F0F), ActivationWord(a, 4 * w), sumi);
      sumi = Dp4a(int((q >> 4) & 0x0F0F0F0F), ActivationWord(a, 16 + 4 * w), sumi);
    }
    // Stored values are q - 8: sum((q - 8) * a) = sumi - 8 * sum(a).
    return HalfToFloat(b.d) * (a.d * float(sumi) - 8.f * a.s);
  }
};

struct WeightQ4_1 {
  using Block = quant::BlockQ4_1;
  static constexpr DType kType = DType::kQ4_1;
  static constexpr int kSubBlocks = 1;
  static PETREL_HD void Decode(const Block& b, int /*sub*/, float* out) {
    const float d = HalfToFloat(b.d), m = HalfToFloat(b.m);
    for (int j = 0; j < 16; ++j) {
      out[j] = MulRn(float(b.qs[j] & 0x0F), d) + m;
      out[j + 16] = MulRn(float(b.qs[j] >> 4), d) + m;
    }
  }
  static PETREL_HD float Dot(const Block& b, int /*sub*/, const ActivationBlock& a) {
    int sumi = 0;
    for (int w = 0; w < 4; ++w) {
      const uint32_t q = Load32(b.qs + 4 * w);
      sumi = Dp4a(int(q & 0x0F0F0F0F), ActivationWord(a, 4 * w), sumi);
      sumi = Dp4a(int((q >> 4) & 0x0F0F0F0F), ActivationWord(a, 16 + 4 * w), sumi);
    }
    return HalfToFloat(b.d) * a.d * float(sumi) + HalfToFloat(b.m) * a.s;
  }
};

struct WeightQ5_0 {
  using Block = quant::BlockQ5_0;
  static constexpr DType kType = DType::kQ5_0;
  static constexpr int kSubBlocks = 1;
  static PETREL_HD void Decode(const Block& b, int /*sub*/, float* out) {
    const float d = HalfToFloat(b.d);
    const uint32_t qh = Load32(b.qh);
    for (int j = 0; j < 16; ++j) {
      const int high0 = ((qh >> j) << 4) & 0x10;
      const int high1 = (qh >> (j + 12)) & 0x10;
      out[j] = float(((b.qs[j] & 0x0F) | high0) - 16) * d;
      out[j + 16] = float(((b.qs[j] >> 4) | high1) - 16) * d;
    }
  }
  static PETREL_HD float Dot(const Block& b, int /*sub*/, const ActivationBlock& a) {
    const uint32_t qh = Load32(b.qh);
    int sumi = 0;
    for (int w = 0; w < 4; ++w) {
      const uint32_t q = Load32(b.qs + 4 * w);
      sumi = Dp4a(int((q & 0x0F0F0F0F) | FifthBits(qh, 4 * w)), ActivationWord(a, 4 * w), sumi);
      sumi = Dp4a(int(((q >> 4) & 0x0F0F0F0F) | FifthBits(qh, 16 + 4 * w)),
                  ActivationWord(a, 16 + 4 * w), sumi);
    }
    return HalfToFloat(b.d) * (a.d * float(sumi) - 16.f * a.s);
  }
};

struct WeightQ5_1 {
  using Block = quant::BlockQ5_1;
  static constexpr DType kType = DType::kQ5_1;
  static constexpr int kSubBlocks = 1;
  static PETREL_HD void Decode(const Block& b, int /*sub*/, float* out) {
    const float d = HalfToFloat(b.d), m = HalfToFloat(b.m);
    const uint32_t qh = Load32(b.qh);
    for (int j = 0; j < 16; ++j) {
      const int high0 = ((qh >> j) << 4) & 0x10;
      const int high1 = (qh >> (j + 12)) & 0x10;
      out[j] = MulRn(float((b.qs[j] & 0x0F) | high0), d) + m;
      out[j + 16] = MulRn(float((b.qs[j] >> 4) | high1), d) + m;
    }
  }
  static PETREL_HD float Dot(const Block& b, int /*sub*/, const ActivationBlock& a) {
    const uint32_t qh = Load32(b.qh);
    int sumi = 0;
    for (int w = 0; w < 4; ++w) {
      const uint32_t q = Load32(b.qs + 4 * w);
      sumi = Dp4a(int((q & 0x0F0F0F0F) | FifthBits(qh, 4 * w)), ActivationWord(a, 4 * w), sumi);
      sumi = Dp4a(int(((q >> 4) & 0x0F0F0F0F) | FifthBits(qh, 16 + 4 * w)),
                  ActivationWord(a, 16 + 4 * w), sumi);
    }
    return HalfToFloat(b.d) * a.d * float(sumi) + HalfToFloat(b.m) * a.s;
  }
};

struct WeightQ8_0 {
  using Block = quant::BlockQ8_0;
  static constexpr DType kType = DType::kQ8_0;
  static constexpr int kSubBlocks = 1;
  static PETREL_HD void Decode(const Block& b, int /*sub*/, float* out) {
    const float d = HalfToFloat(b.d);
    for (int j = 0; j < 32; ++j) out[j] = float(b.qs[j]) * d;
  }
  static PETREL_HD float Dot(const Block& b, int /*sub*/, const ActivationBlock& a) {
    const uint8_t* qs = reinterpret_cast<const uint8_t*>(b.qs);
    int sumi = 0;
    for (int w = 0; w < 8; ++w)
      sumi = Dp4a(int(Load32(qs + 4 * w)), ActivationWord(a, 4 * w), sumi);
    return HalfToFloat(b.d) * a.d * float(sumi);
  }
};

struct WeightIQ4_NL {
  using Block = quant::BlockIQ4_NL;
  static constexpr DType kType = DType::kIQ4_NL;
  static constexpr int kSubBlocks = 1;
  static PETREL_HD void Decode(const Block& b, int /*sub*/, float* out) {
    const float d = HalfToFloat(b.d);
    for (int j = 0; j < 16; ++j) {
      out[j] = d * float(IQ4NLValue(b.qs[j] & 0xF));
      out[j + 16] = d * float(IQ4NLValue(b.qs[j] >> 4));
    }
  }
  static PETREL_HD float Dot(const Block& b, int /*sub*/, const ActivationBlock& a) {
    int sumi = 0;
    for (int w = 0; w < 4; ++w) {
      const uint32_t q = Load32(b.qs + 4 * w);
      sumi = Dp4a(IQ4NLWord(q, 0), ActivationWord(a, 4 * w), sumi);
      sumi = Dp4a(IQ4NLWord(q, 4), ActivationWord(a, 16 + 4 * w), sumi);
    }
    return HalfToFloat(b.d) * a.d * float(sumi);
  }
};

// ---- The 256-element super-blocks: eight sub-blocks each ----

// Q2_K: sub-block s is 2-bit plane s % 4 of bytes 32 * (s / 4) .. +32; each 16 elements have a
// 4-bit scale and a 4-bit min.
struct WeightQ2_K {
  using Block = quant::BlockQ2_K;
  static constexpr DType kType = DType::kQ2_K;
  static constexpr int kSubBlocks = 8;
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float d = HalfToFloat(b.d), dmin = HalfToFloat(b.dmin);
    const uint8_t* q = b.qs + 32 * (sub / 4);
    const int shift = 2 * (sub % 4);
    for (int k = 0; k < 2; ++k) {
      const uint8_t sc = b.scales[2 * sub + k];
      const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
      for (int l = 0; l < 16; ++l)
        out[16 * k + l] = MulRn(dl, float((q[l + 16 * k] >> shift) & 3)) - ml;
    }
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const uint8_t* q = b.qs + 32 * (sub / 4);
    const int shift = 2 * (sub % 4);
    int scaled = 0, offset = 0;  // sum(scale * q . a), sum(min * sum(a)) over the two halves
    for (int k = 0; k < 2; ++k) {
      int sumi = 0;
      for (int w = 0; w < 4; ++w) {
        const uint32_t word = (Load32(q + 16 * k + 4 * w) >> shift) & 0x03030303;
        sumi = Dp4a(int(word), ActivationWord(a, 16 * k + 4 * w), sumi);
      }
      const uint8_t sc = b.scales[2 * sub + k];
      scaled += (sc & 0xF) * sumi;
      offset += (sc >> 4) * ActivationSum16(a, 16 * k);
    }
    return a.d * (HalfToFloat(b.d) * float(scaled) - HalfToFloat(b.dmin) * float(offset));
  }
};

// Q3_K: as Q2_K's planes, plus a high bit per element in hmask (clear: minus 4) and a signed
// 6-bit scale per 16 elements.
struct WeightQ3_K {
  using Block = quant::BlockQ3_K;
  static constexpr DType kType = DType::kQ3_K;
  static constexpr int kSubBlocks = 8;
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float d_all = HalfToFloat(b.d);
    const uint8_t* q = b.qs + 32 * (sub / 4);
    const int shift = 2 * (sub % 4);
    const uint8_t mask = uint8_t(1u << sub);
    for (int k = 0; k < 2; ++k) {
      const float dl = d_all * float(Q3KScale(b.scales, 2 * sub + k));
      for (int l = 0; l < 16; ++l) {
        const int low = (q[l + 16 * k] >> shift) & 3;
        const int high = (b.hmask[l + 16 * k] & mask) ? 0 : 4;
        out[16 * k + l] = dl * float(low - high);
      }
    }
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const uint8_t* q = b.qs + 32 * (sub / 4);
    const int shift = 2 * (sub % 4);
    int scaled = 0;
    for (int k = 0; k < 2; ++k) {
      int sumi = 0;
      for (int w = 0; w < 4; ++w) {
        const uint32_t low = (Load32(q + 16 * k + 4 * w) >> shift) & 0x03030303;
        const uint32_t high = ((Load32(b.hmask + 16 * k + 4 * w) >> sub) & 0x01010101) << 2;
        sumi = Dp4a(int(low | high), ActivationWord(a, 16 * k + 4 * w), sumi);
      }
      // Stored values are (low | high << 2) - 4.
      scaled += Q3KScale(b.scales, 2 * sub + k) * (sumi - 4 * ActivationSum16(a, 16 * k));
    }
    return HalfToFloat(b.d) * a.d * float(scaled);
  }
};

// Q4_K: sub-block s is the low (s even) or high nibbles of bytes 32 * (s / 2) .. +32, with a
// 6-bit scale and min.
struct WeightQ4_K {
  using Block = quant::BlockQ4_K;
  static constexpr DType kType = DType::kQ4_K;
  static constexpr int kSubBlocks = 8;
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float d = HalfToFloat(b.d), min = HalfToFloat(b.dmin);
    int sc, m;
    ScaleMinK4(sub, b.scales, &sc, &m);
    const float d1 = d * float(sc), m1 = min * float(m);
    const uint8_t* q = b.qs + 32 * (sub / 2);
    const int shift = 4 * (sub % 2);
    for (int l = 0; l < 32; ++l) out[l] = MulRn(d1, float((q[l] >> shift) & 0xF)) - m1;
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const uint8_t* q = b.qs + 32 * (sub / 2);
    const int shift = 4 * (sub % 2);
    int sumi = 0;
    for (int w = 0; w < 8; ++w) {
      sumi = Dp4a(int((Load32(q + 4 * w) >> shift) & 0x0F0F0F0F), ActivationWord(a, 4 * w), sumi);
    }
    int sc, m;
    ScaleMinK4(sub, b.scales, &sc, &m);
    return HalfToFloat(b.d) * float(sc) * a.d * float(sumi) - HalfToFloat(b.dmin) * float(m) * a.s;
  }
};

// Q5_K: Q4_K plus a fifth bit per element: bit s of qh[l].
struct WeightQ5_K {
  using Block = quant::BlockQ5_K;
  static constexpr DType kType = DType::kQ5_K;
  static constexpr int kSubBlocks = 8;
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float d = HalfToFloat(b.d), min = HalfToFloat(b.dmin);
    int sc, m;
    ScaleMinK4(sub, b.scales, &sc, &m);
    const float d1 = d * float(sc), m1 = min * float(m);
    const uint8_t* ql = b.qs + 32 * (sub / 2);
    const int shift = 4 * (sub % 2);
    const uint8_t mask = uint8_t(1u << sub);
    for (int l = 0; l < 32; ++l) {
      out[l] = MulRn(d1, float(((ql[l] >> shift) & 0xF) + (b.qh[l] & mask ? 16 : 0))) - m1;
    }
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const uint8_t* ql = b.qs + 32 * (sub / 2);
    const int shift = 4 * (sub % 2);
    int sumi = 0;
    for (int w = 0; w < 8; ++w) {
      const uint32_t low = (Load32(ql + 4 * w) >> shift) & 0x0F0F0F0F;
      const uint32_t high = ((Load32(b.qh + 4 * w) >> sub) & 0x01010101) << 4;
      sumi = Dp4a(int(low | high), ActivationWord(a, 4 * w), sumi);
    }
    int sc, m;
    ScaleMinK4(sub, b.scales, &sc, &m);
    return HalfToFloat(b.d) * float(sc) * a.d * float(sumi) - HalfToFloat(b.dmin) * float(m) * a.s;
  }
};

// Q6_K: each 128 elements are 64 bytes of low nibbles and 32 bytes of 2-bit high parts; sub-block
// s is group s % 4 of half s / 4, with a signed 8-bit scale per 16 elements; values minus 32.
struct WeightQ6_K {
  using Block = quant::BlockQ6_K;
  static constexpr DType kType = DType::kQ6_K;
  static constexpr int kSubBlocks = 8;
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float d = HalfToFloat(b.d);
    const int half = sub / 4, group = sub % 4;
    const uint8_t* ql = b.ql + 64 * half + 32 * (group % 2);
    const uint8_t* qh = b.qh + 32 * half;
    const int8_t* sc = b.scales + 8 * half + 2 * group;
    const int low_shift = 4 * (group / 2), high_shift = 2 * group;
    for (int l = 0; l < 32; ++l) {
      const int q = int(((ql[l] >> low_shift) & 0xF) | (((qh[l] >> high_shift) & 3) << 4)) - 32;
      out[l] = d * float(sc[l / 16]) * float(q);
    }
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const int half = sub / 4, group = sub % 4;
    const uint8_t* ql = b.ql + 64 * half + 32 * (group % 2);
    const uint8_t* qh = b.qh + 32 * half;
    const int8_t* sc = b.scales + 8 * half + 2 * group;
    const int low_shift = 4 * (group / 2), high_shift = 2 * group;
    int scaled = 0;
    for (int k = 0; k < 2; ++k) {
      int sumi = 0;
      for (int w = 0; w < 4; ++w) {
        const int l = 16 * k + 4 * w;
        const uint32_t low = (Load32(ql + l) >> low_shift) & 0x0F0F0F0F;
        const uint32_t high = ((Load32(qh + l) >> high_shift) & 0x03030303) << 4;
        sumi = Dp4a(int(low | high), ActivationWord(a, l), sumi);
      }
      scaled += sc[k] * (sumi - 32 * ActivationSum16(a, 16 * k));
    }
    return HalfToFloat(b.d) * a.d * float(scaled);
  }
};

// IQ4_XS: sub-block s is 16 bytes of IQ4_NL-style nibbles with a signed 6-bit scale.
struct WeightIQ4_XS {
  using Block = quant::BlockIQ4_XS;
  static constexpr DType kType = DType::kIQ4_XS;
  static constexpr int kSubBlocks = 8;
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float dl = HalfToFloat(b.d) * float(IQ4XSScale(b, sub));
    const uint8_t* qs = b.qs + 16 * sub;
    for (int j = 0; j < 16; ++j) {
      out[j] = dl * float(IQ4NLValue(qs[j] & 0xF));
      out[j + 16] = dl * float(IQ4NLValue(qs[j] >> 4));
    }
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const uint8_t* qs = b.qs + 16 * sub;
    int sumi = 0;
    for (int w = 0; w < 4; ++w) {
      const uint32_t q = Load32(qs + 4 * w);
      sumi = Dp4a(IQ4NLWord(q, 0), ActivationWord(a, 4 * w), sumi);
      sumi = Dp4a(IQ4NLWord(q, 4), ActivationWord(a, 16 + 4 * w), sumi);
    }
    return HalfToFloat(b.d) * float(IQ4XSScale(b, sub)) * a.d * float(sumi);
  }
};

// ---- Float weights: element-wise, or eight at a time ----

// The 16 bytes at `p` as four little-endian words; on the device one 16-byte load, so `p` must
// be 16-byte aligned there.
PETREL_HD void Load16Bytes(const void* p, uint32_t* words /* (4) */) {
#if defined(__CUDA_ARCH__)
  const uint4 v = *static_cast<const uint4*>(p);
  words[0] = v.x;
  words[1] = v.y;
  words[2] = v.z;
  words[3] = v.w;
#else
  std::memcpy(words, p, 16);
#endif
}

// Load(row, j): element j as f32. Load8(row, j, out): elements j..j+7, with the row's address of
// element j 16-byte aligned (F32: 32 bytes read as two 16-byte loads).
struct WeightF32 {
  static constexpr DType kType = DType::kF32;
  static PETREL_HD float Load(const void* row, int64_t j) {
    return static_cast<const float*>(row)[j];
  }
  static PETREL_HD void Load8(const void* row, int64_t j, float* out) {
    const float* values = static_cast<const float*>(row) + j;
    uint32_t words[8];
    Load16Bytes(values, words);
    Load16Bytes(values + 4, words + 4);
    for (int i = 0; i < 8; ++i) {
#if defined(__CUDA_ARCH__)
      out[i] = __uint_as_float(words[i]);
#else
      std::memcpy(&out[i], &words[i], 4);
#endif
    }
  }
};
struct WeightF16 {
  static constexpr DType kType = DType::kF16;
  static PETREL_HD float Load(const void* row, int64_t j) {
    return HalfToFloat(static_cast<const uint16_t*>(row)[j]);
  }
  static PETREL_HD void Load8(const void* row, int64_t j, float* out) {
    uint32_t words[4];
    Load16Bytes(static_cast<const uint16_t*>(row) + j, words);
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = HalfToFloat(uint16_t(words[i]));
      out[2 * i + 1] = HalfToFloat(uint16_t(words[i] >> 16));
    }
  }
};
struct WeightBF16 {
  static constexpr DType kType = DType::kBF16;
  static PETREL_HD float Load(const void* row, int64_t j) {
    return BFloat16ToFloat(static_cast<const uint16_t*>(row)[j]);
  }
  static PETREL_HD void Load8(const void* row, int64_t j, float* out) {
    uint32_t words[4];
    Load16Bytes(static_cast<const uint16_t*>(row) + j, words);
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = BFloat16ToFloat(uint16_t(words[i]));
      out[2 * i + 1] = BFloat16ToFloat(uint16_t(words[i] >> 16));
    }
  }
};

// The device's row per weight type: the block formats it decodes, one Weight struct each.
template <class... Weights>
struct WeightList {
  // Calls visit(W{}) for the W whose kType is `type` and returns true; false when none is.
  template <class Visitor>
  static bool Visit(DType type, Visitor&& visit) {
    return ((Weights::kType == type ? (visit(Weights{}), true) : false) || ...);
  }
};
template <class... First, class... Second>
WeightList<First..., Second...> Concat(WeightList<First...>, WeightList<Second...>);

// The block types in two halves, which the matrix-vector kernels instantiate in two files
// (matvec_blocks.cu, matvec_blocks_lowbit.cu), so that nvcc compiles them in parallel: that
// kernel inlines a type's dot once per token slot, which makes it the largest file by far.
using ClassicBlockWeights =
    WeightList<WeightQ4_0, WeightQ4_1, WeightQ5_0, WeightQ5_1, WeightQ8_0, WeightQ2_K, WeightQ3_K,
               WeightQ4_K, WeightQ5_K, WeightQ6_K, WeightIQ4_NL, WeightIQ4_XS>;
using LowBitBlockWeights =
    WeightList<WeightIQ1_S, WeightIQ1_M, WeightIQ2_XXS, WeightIQ2_XS, WeightIQ2_S, WeightIQ3_XXS,
               WeightIQ3_S, WeightTQ1_0, WeightTQ2_0, WeightMXFP4, WeightQ1_0, WeightQ2_0>;
using BlockWeights = decltype(Concat(ClassicBlockWeights{}, LowBitBlockWeights{}));
using FloatWeights = WeightList<WeightF32, WeightF16, WeightBF16>;

// Calls visit(WeightX{}) for a block type and returns true; false for every other type.
template <class Visit>
bool VisitBlockType(DType type, Visit&& visit) {
  return BlockWeights::Visit(type, visit);
}

// Calls visit(WeightF32{}), visit(WeightF16{}) or visit(WeightBF16{}) for a float type and
// returns true; false for every other type.
template <class Visit>
bool VisitFloatType(DType type, Visit&& visit) {
  return FloatWeights::Visit(type, visit);
}

}  // namespace petrel::cuda
