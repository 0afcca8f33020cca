// Block decoders and integer dot products of the codebook formats IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS and IQ3_S, as ggml/llama.cpp define them; blocks.cuh states the contract. Each
// group of 8 elements (IQ1, IQ2) or 4 (IQ3) is one entry of a codebook (iq_grids.cuh), with 8
// sign bits per 8 elements (IQ2, IQ3) or a shift of +-1/8 (IQ1), and a small odd integer scale
// per 16 or 32 elements times the super-block's f16 scale. Every format is a 256-element
// super-block, seen as eight 32-element sub-blocks.
//
// The dots keep everything integer up to one float product: the odd scales (2s + 1, over 8 or 4
// for IQ2/IQ3, and IQ1's shift folded in as 8 * level +- 1) multiply the dp4a sums, at most
// about 2^23 in magnitude, so exact.
#pragma once

#include <cstdint>

#include "cuda/matmul/block_common.cuh"  // ActivationBlock, the scalar helpers
#include "cuda/matmul/iq_grids.cuh"      // the codebooks
#include "quant/blocks.h"                // the block layouts
#include "quant/iq_grids.h"              // kIQ1Delta, IQ2Signs
#include "quant/types.h"                 // DType

namespace petrel::cuda {

// The eight sign bits (bit j: element j negative) of IQ2/IQ3 from the seven stored ones: the
// eighth makes the count of negatives even; quant::IQ2Signs.
PETREL_HD uint32_t IQSignByte(uint32_t seven_bits) {
#if defined(__CUDA_ARCH__)
  return seven_bits | ((uint32_t(__popc(seven_bits)) & 1u) << 7);
#else
  return quant::IQ2Signs(seven_bits);
#endif
}

// Byte j of a codebook entry: element j of its group.
PETREL_HD uint32_t EntryByte(uint64_t entry, int j) { return uint32_t(entry >> (8 * j)) & 0xFF; }

// Eight elements of IQ2/IQ3: db times the magnitudes of `entry`, negated where `signs` has a bit.
PETREL_HD void DecodeSigned8(float db, uint64_t entry, uint32_t signs, float* out /* (8) */) {
  for (int j = 0; j < 8; ++j) {
    const float value = db * float(EntryByte(entry, j));
    out[j] = (signs >> j) & 1 ? -value : value;
  }
}

// acc + the dot of the eight signed magnitudes with activations j..j+7.
PETREL_HD int DotSigned8(uint64_t entry, uint32_t signs, const ActivationBlock& a, int j, int acc) {
  acc = Dp4a(NegateBytes(uint32_t(entry), ByteMask(signs)), ActivationWord(a, j), acc);
  return Dp4a(NegateBytes(uint32_t(entry >> 32), ByteMask(signs >> 4)), ActivationWord(a, j + 4),
              acc);
}

// Eight elements of IQ1: dl * (level + delta), the levels -1, 0, +1 as int8 bytes of `entry`.
PETREL_HD void DecodeShifted8(float dl, uint64_t entry, float delta, float* out /* (8) */) {
  for (int j = 0; j < 8; ++j) out[j] = dl * (float(int8_t(EntryByte(entry, j))) + delta);
}

// 8 * (the dot of the eight levels of `entry` with activations j..j+7) +- their sum: the group's
// dot times 8, its shift of +-1/8 included (`negative`: the shift is -1/8).
PETREL_HD int DotShifted8(uint64_t entry, bool negative, const ActivationBlock& a, int j) {
  const int lo = ActivationWord(a, j), hi = ActivationWord(a, j + 4);
  const int levels = Dp4a(int(uint32_t(entry >> 32)), hi, Dp4a(int(uint32_t(entry)), lo, 0));
  const int sum = Dp4a(0x01010101, hi, Dp4a(0x01010101, lo, 0));
  return 8 * levels + (negative ? -sum : sum);
}

// IQ2_XXS: sub-block s is two words at qs + 4s: four 8-bit grid indices (the bytes of the
// first); four 7-bit sign groups and a 4-bit scale (the second). Scale d (0.5 + s) / 4.
struct WeightIQ2_XXS {
  using Block = quant::BlockIQ2_XXS;
  static constexpr DType kType = DType::kIQ2_XXS;
  static constexpr int kSubBlocks = 8;
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const uint8_t* q = reinterpret_cast<const uint8_t*>(b.qs + 4 * sub);
    const uint32_t aux = Load32(q + 4);
    const float db = HalfToFloat(b.d) * (0.5f + float(aux >> 28)) * 0.25f;
    for (int l = 0; l < 4; ++l) {
      DecodeSigned8(db, IQ2XXSGrid(q[l]), IQSignByte((aux >> (7 * l)) & 127), out + 8 * l);
    }
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const uint8_t* q = reinterpret_cast<const uint8_t*>(b.qs + 4 * sub);
    const uint32_t aux = Load32(q + 4);
    int sumi = 0;
    for (int l = 0; l < 4; ++l) {
      sumi = DotSigned8(IQ2XXSGrid(q[l]), IQSignByte((aux >> (7 * l)) & 127), a, 8 * l, sumi);
    }
    const int total = (2 * int(aux >> 28) + 1) * sumi;
    return HalfToFloat(b.d) * a.d * float(total) * 0.125f;
  }
};

// IQ2_XS: per 8 elements a uint16 of a 9-bit grid index and 7 sign bits; per 16 elements a
// 4-bit scale.
struct WeightIQ2_XS {
  using Block = quant::BlockIQ2_XS;
  static constexpr DType kType = DType::kIQ2_XS;
  static constexpr int kSubBlocks = 8;
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float d = HalfToFloat(b.d);
    const float db[2] = {d * (0.5f + float(b.scales[sub] & 0xF)) * 0.25f,
                         d * (0.5f + float(b.scales[sub] >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l) {
      const uint32_t q = b.qs[4 * sub + l];
      DecodeSigned8(db[l / 2], IQ2XSGrid(q & 511), IQSignByte(q >> 9), out + 8 * l);
    }
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    int total = 0;
    for (int k = 0; k < 2; ++k) {
      int sumi = 0;
      for (int l = 2 * k; l < 2 * k + 2; ++l) {
        const uint32_t q = b.qs[4 * sub + l];
        sumi = DotSigned8(IQ2XSGrid(q & 511), IQSignByte(q >> 9), a, 8 * l, sumi);
      }
      total += (2 * ((b.scales[sub] >> (4 * k)) & 0xF) + 1) * sumi;
    }
    return HalfToFloat(b.d) * a.d * float(total) * 0.125f;
  }
};

// IQ2_S: per 8 elements a 10-bit grid index (a byte of qs, two bits of qh) and a byte of signs
// (qs + 32); per 16 elements a 4-bit scale.
struct WeightIQ2_S {
  using Block = quant::BlockIQ2_S;
  static constexpr DType kType = DType::kIQ2_S;
  static constexpr int kSubBlocks = 8;
  static PETREL_HD int GridIndex(const Block& b, int sub, int l) {
    return b.qs[4 * sub + l] | ((b.qh[sub] << (8 - 2 * l)) & 0x300);
  }
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float d = HalfToFloat(b.d);
    const float db[2] = {d * (0.5f + float(b.scales[sub] & 0xF)) * 0.25f,
                         d * (0.5f + float(b.scales[sub] >> 4)) * 0.25f};
    const uint8_t* signs = b.qs + 32 + 4 * sub;
    for (int l = 0; l < 4; ++l) {
      DecodeSigned8(db[l / 2], IQ2SGrid(GridIndex(b, sub, l)), signs[l], out + 8 * l);
    }
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const uint8_t* signs = b.qs + 32 + 4 * sub;
    int total = 0;
    for (int k = 0; k < 2; ++k) {
      int sumi = 0;
      for (int l = 2 * k; l < 2 * k + 2; ++l) {
        sumi = DotSigned8(IQ2SGrid(GridIndex(b, sub, l)), signs[l], a, 8 * l, sumi);
      }
      total += (2 * ((b.scales[sub] >> (4 * k)) & 0xF) + 1) * sumi;
    }
    return HalfToFloat(b.d) * a.d * float(total) * 0.125f;
  }
};

// IQ3_XXS: per 4 elements an 8-bit grid index (qs); per 32 elements a word at qs + 64 of four
// 7-bit sign groups and a 4-bit scale. Scale d (0.5 + s) / 2.
struct WeightIQ3_XXS {
  using Block = quant::BlockIQ3_XXS;
  static constexpr DType kType = DType::kIQ3_XXS;
  static constexpr int kSubBlocks = 8;
  // The eight magnitudes of group l (two grid entries).
  static PETREL_HD uint64_t Entry(const uint8_t* q, int l) {
    return IQ3XXSGrid(q[2 * l]) | (uint64_t(IQ3XXSGrid(q[2 * l + 1])) << 32);
  }
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const uint8_t* q = b.qs + 8 * sub;
    const uint32_t aux = Load32(b.qs + 64 + 4 * sub);
    const float db = HalfToFloat(b.d) * (0.5f + float(aux >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l) {
      DecodeSigned8(db, Entry(q, l), IQSignByte((aux >> (7 * l)) & 127), out + 8 * l);
    }
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const uint8_t* q = b.qs + 8 * sub;
    const uint32_t aux = Load32(b.qs + 64 + 4 * sub);
    int sumi = 0;
    for (int l = 0; l < 4; ++l) {
      sumi = DotSigned8(Entry(q, l), IQSignByte((aux >> (7 * l)) & 127), a, 8 * l, sumi);
    }
    const int total = (2 * int(aux >> 28) + 1) * sumi;
    return HalfToFloat(b.d) * a.d * float(total) * 0.25f;
  }
};

// IQ3_S: per 4 elements a 9-bit grid index (a byte of qs, a bit of qh); a sign bit per element;
// per 32 elements a 4-bit scale, d (1 + 2s).
struct WeightIQ3_S {
  using Block = quant::BlockIQ3_S;
  static constexpr DType kType = DType::kIQ3_S;
  static constexpr int kSubBlocks = 8;
  static PETREL_HD uint64_t Entry(const Block& b, int sub, int l) {
    const uint8_t* q = b.qs + 8 * sub;
    const int qh = b.qh[sub];
    const uint32_t first = IQ3SGrid(q[2 * l] | ((qh << (8 - 2 * l)) & 256));
    const uint32_t second = IQ3SGrid(q[2 * l + 1] | ((qh << (7 - 2 * l)) & 256));
    return first | (uint64_t(second) << 32);
  }
  static PETREL_HD int Scale(const Block& b, int sub) {
    return 1 + 2 * ((b.scales[sub / 2] >> (4 * (sub % 2))) & 0xF);
  }
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float db = HalfToFloat(b.d) * float(Scale(b, sub));
    const uint8_t* signs = b.signs + 4 * sub;
    for (int l = 0; l < 4; ++l) DecodeSigned8(db, Entry(b, sub, l), signs[l], out + 8 * l);
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const uint8_t* signs = b.signs + 4 * sub;
    int sumi = 0;
    for (int l = 0; l < 4; ++l) sumi = DotSigned8(Entry(b, sub, l), signs[l], a, 8 * l, sumi);
    return HalfToFloat(b.d) * a.d * float(Scale(b, sub) * sumi);
  }
};

// IQ1_S: per 8 elements an 11-bit index into the IQ1 grid (a byte of qs, three bits of qh); per
// 32 elements (qh[s]) a 3-bit scale, d (2s + 1), and the sign of the shift (bit 15).
struct WeightIQ1_S {
  using Block = quant::BlockIQ1_S;
  static constexpr DType kType = DType::kIQ1_S;
  static constexpr int kSubBlocks = 8;
  static PETREL_HD uint64_t Entry(const Block& b, int sub, int l) {
    return IQ1SGrid(b.qs[4 * sub + l] | (((b.qh[sub] >> (3 * l)) & 7) << 8));
  }
  static PETREL_HD int Scale(const Block& b, int sub) { return 2 * ((b.qh[sub] >> 12) & 7) + 1; }
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float dl = HalfToFloat(b.d) * float(Scale(b, sub));
    const float delta = b.qh[sub] & 0x8000 ? -quant::kIQ1Delta : quant::kIQ1Delta;
    for (int l = 0; l < 4; ++l) DecodeShifted8(dl, Entry(b, sub, l), delta, out + 8 * l);
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    const bool negative = b.qh[sub] & 0x8000;
    int sum8 = 0;  // 8 times the dot
    for (int l = 0; l < 4; ++l) sum8 += DotShifted8(Entry(b, sub, l), negative, a, 8 * l);
    return HalfToFloat(b.d) * a.d * float(Scale(b, sub) * sum8) * 0.125f;
  }
};

// IQ1_M: as IQ1_S's groups, with the three high index bits and the shift's sign in a nibble of
// qh per 8 elements, a 3-bit scale per 16 elements (four per uint16 of `scales`), and the f16
// super-block scale in the top nibbles of those four uint16.
struct WeightIQ1_M {
  using Block = quant::BlockIQ1_M;
  static constexpr DType kType = DType::kIQ1_M;
  static constexpr int kSubBlocks = 8;
  // The uint16 k of `scales`, read a byte at a time: the block has no 2-byte alignment.
  static PETREL_HD uint32_t Scales16(const Block& b, int k) {
    return b.scales[2 * k] | (uint32_t(b.scales[2 * k + 1]) << 8);
  }
  static PETREL_HD float SuperScale(const Block& b) {
    const uint32_t bits = (Scales16(b, 0) >> 12) | ((Scales16(b, 1) >> 8) & 0x00F0) |
                          ((Scales16(b, 2) >> 4) & 0x0F00) | (Scales16(b, 3) & 0xF000);
    return HalfToFloat(uint16_t(bits));
  }
  // Scale 2s + 1 of half `k` (16 elements) of sub-block `sub`.
  static PETREL_HD int Scale(const Block& b, int sub, int k) {
    return 2 * ((Scales16(b, sub / 2) >> (6 * (sub % 2) + 3 * k)) & 7) + 1;
  }
  // Group l's nibble of qh: three high index bits, then the shift's sign.
  static PETREL_HD uint32_t High(const Block& b, int sub, int l) {
    return (b.qh[2 * sub + l / 2] >> (4 * (l % 2))) & 0xF;
  }
  static PETREL_HD uint64_t Entry(const Block& b, int sub, int l) {
    return IQ1SGrid(b.qs[4 * sub + l] | ((High(b, sub, l) & 7) << 8));
  }
  static PETREL_HD void Decode(const Block& b, int sub, float* out) {
    const float d = SuperScale(b);
    const float dl[2] = {d * float(Scale(b, sub, 0)), d * float(Scale(b, sub, 1))};
    for (int l = 0; l < 4; ++l) {
      const float delta = High(b, sub, l) & 8 ? -quant::kIQ1Delta : quant::kIQ1Delta;
      DecodeShifted8(dl[l / 2], Entry(b, sub, l), delta, out + 8 * l);
    }
  }
  static PETREL_HD float Dot(const Block& b, int sub, const ActivationBlock& a) {
    int total = 0;  // 8 times the dot over d
    for (int k = 0; k < 2; ++k) {
      int sum8 = 0;
      for (int l = 2 * k; l < 2 * k + 2; ++l) {
        sum8 += DotShifted8(Entry(b, sub, l), High(b, sub, l) & 8, a, 8 * l);
      }
      total += Scale(b, sub, k) * sum8;
    }
    return SuperScale(b) * a.d * float(total) * 0.125f;
  }
};

}  // namespace petrel::cuda
