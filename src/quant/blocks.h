// GGUF/ggml-compatible block layouts of the quantized weight formats, byte for byte.
// Sizes are checked against the DType traits table in types.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/types.h"  // Traits, DType

namespace petrel::quant {

constexpr size_t kQK = 32;     // elements per block of the 32-block formats
constexpr size_t kQK_K = 256;  // elements per super-block of the K-quants, IQ and TQ formats

// Scales `d` (and mins `m`) are IEEE half bit patterns, as in ggml's `ggml_half`.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];  // element j in the low nibble of qs[j], element j + 16 in the high one
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit j: the fifth bit of element j (little-endian uint32)
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;  // d * sum(qs), for formats with a min
  int8_t qs[kQK];
};

struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // per 16 elements: 4-bit scale (low) and 4-bit min (high)
  uint8_t qs[kQK_K / 4];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // high bit of each 3-bit quant
  uint8_t qs[kQK_K / 4];     // low 2 bits
  uint8_t scales[12];        // sixteen 6-bit scales
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];  // eight 6-bit scales and eight 6-bit mins
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];  // low 4 bits
  uint8_t qh[kQK_K / 4];  // high 2 bits
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;  // f32, not f16: this is the activation format of the K-quant dot products
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sum of each 16 quants
};

struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK / 2];  // indices into kIQ4NLValues, nibbles as in Q4_0
};
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;             // high 2 bits of the eight 6-bit scales
  uint8_t scales_l[kQK_K / 64];  // low 4 bits
  uint8_t qs[kQK_K / 2];
};

// The IQ1/IQ2/IQ3 super-blocks index the codebooks of iq_grids.h; field comments give the layout.
struct BlockIQ2_XXS {
  uint16_t d;
  // Per 32 elements two uint32 (little-endian): four 8-bit grid indices (8 elements each), then
  // four 7-bit sign groups and a 4-bit scale (bits 28..31).
  uint16_t qs[kQK_K / 8];
};
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[kQK_K / 8];         // per 8 elements: 9-bit grid index, 7 sign bits
  uint8_t scales[kQK_K / 32];     // two 4-bit scales per 32 elements (one per 16)
};
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];          // 32 low grid-index bytes, then 32 bytes of 8 sign bits each
  uint8_t qh[kQK_K / 32];         // 2 high grid-index bits per 8 elements
  uint8_t scales[kQK_K / 32];     // two 4-bit scales per 32 elements
};
struct BlockIQ3_XXS {
  uint16_t d;
  // 64 grid-index bytes (4 elements each), then per 32 elements a uint32 of four 7-bit sign
  // groups and a 4-bit scale (bits 28..31).
  uint8_t qs[3 * kQK_K / 8];
};
struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[kQK_K / 4];          // low 8 bits of the 9-bit grid indices (4 elements each)
  uint8_t qh[kQK_K / 32];         // their ninth bits
  uint8_t signs[kQK_K / 8];       // one sign bit per element
  uint8_t scales[kQK_K / 64];     // two 4-bit scales per 64 elements
};
struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[kQK_K / 8];          // low 8 bits of the 11-bit grid indices (8 elements each)
  // Per 32 elements: 3 high index bits per 8 elements (bits 0..11), a 3-bit scale (12..14) and
  // the sign of the group's delta (15).
  uint16_t qh[kQK_K / 32];
};
struct BlockIQ1_M {
  uint8_t qs[kQK_K / 8];          // low 8 bits of the grid indices
  uint8_t qh[kQK_K / 16];         // per 16 elements: 3 high bits and a delta sign per 8
  // Four 3-bit scales per 64 elements, and across the four uint16 the f16 super-block scale's
  // bits in the top nibbles.
  uint8_t scales[kQK_K / 32];
};

// Ternary formats: levels -1, 0, +1 times one scale per 256 elements.
struct BlockTQ1_0 {
  uint8_t qs[(kQK_K - 4 * kQK_K / 64) / 5];  // 5 base-3 digits per byte (240 elements)
  uint8_t qh[kQK_K / 64];                    // 4 base-3 digits per byte (16 elements)
  uint16_t d;
};
struct BlockTQ2_0 {
  uint8_t qs[kQK_K / 4];  // 2 bits per element, level + 1
  uint16_t d;
};

// MXFP4 (OCP microscaling): 32 E2M1 values sharing one power-of-two (E8M0) scale.
struct BlockMXFP4 {
  uint8_t e;            // E8M0 exponent
  uint8_t qs[kQK / 2];  // indices into kMXFP4Values, nibbles as in Q4_0
};

// Q1_0 and Q2_0: sign bits (+-d) per 128 elements, and 2-bit levels (level - 1) x d per 64.
constexpr size_t kQK1_0 = 128;
constexpr size_t kQK2_0 = 64;
struct BlockQ1_0 {
  uint16_t d;
  uint8_t qs[kQK1_0 / 8];
};
struct BlockQ2_0 {
  uint16_t d;
  uint8_t qs[kQK2_0 / 4];
};

// E2M1 values, doubled (the E8M0 scale is halved to match): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
// negatives.
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The non-linear 4-bit grid of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl).
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Each struct is exactly the block size of its row in the traits table (types.h).
#define PETREL_BLOCK_MATCHES_TRAITS(name) \
  static_assert(sizeof(Block##name) == Traits(DType::k##name).block_bytes, #name " block size");
PETREL_BLOCK_MATCHES_TRAITS(Q4_0)
PETREL_BLOCK_MATCHES_TRAITS(Q4_1)
PETREL_BLOCK_MATCHES_TRAITS(Q5_0)
PETREL_BLOCK_MATCHES_TRAITS(Q5_1)
PETREL_BLOCK_MATCHES_TRAITS(Q8_0)
PETREL_BLOCK_MATCHES_TRAITS(Q8_1)
PETREL_BLOCK_MATCHES_TRAITS(Q2_K)
PETREL_BLOCK_MATCHES_TRAITS(Q3_K)
PETREL_BLOCK_MATCHES_TRAITS(Q4_K)
PETREL_BLOCK_MATCHES_TRAITS(Q5_K)
PETREL_BLOCK_MATCHES_TRAITS(Q6_K)
PETREL_BLOCK_MATCHES_TRAITS(Q8_K)
PETREL_BLOCK_MATCHES_TRAITS(IQ4_NL)
PETREL_BLOCK_MATCHES_TRAITS(IQ4_XS)
PETREL_BLOCK_MATCHES_TRAITS(IQ2_XXS)
PETREL_BLOCK_MATCHES_TRAITS(IQ2_XS)
PETREL_BLOCK_MATCHES_TRAITS(IQ2_S)
PETREL_BLOCK_MATCHES_TRAITS(IQ3_XXS)
PETREL_BLOCK_MATCHES_TRAITS(IQ3_S)
PETREL_BLOCK_MATCHES_TRAITS(IQ1_S)
PETREL_BLOCK_MATCHES_TRAITS(IQ1_M)
PETREL_BLOCK_MATCHES_TRAITS(TQ1_0)
PETREL_BLOCK_MATCHES_TRAITS(TQ2_0)
PETREL_BLOCK_MATCHES_TRAITS(MXFP4)
PETREL_BLOCK_MATCHES_TRAITS(Q1_0)
PETREL_BLOCK_MATCHES_TRAITS(Q2_0)
#undef PETREL_BLOCK_MATCHES_TRAITS

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block.
inline void ScaleMinK4(size_t j, const uint8_t* scales, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// The sixteen signed 6-bit scales (-32..31) of a Q3_K super-block.
inline void UnpackQ3KScales(const uint8_t* packed, int8_t* scales /* (16) */) {
  for (size_t j = 0; j < 16; ++j) {
    const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = int8_t((low | (high << 4)) - 32);
  }
}

// The eight 6-bit scales (unbiased: -32..31) of an IQ4_XS super-block.
inline int IQ4XSScale(const BlockIQ4_XS& block, size_t ib) {
  const int low = (block.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
  const int high = (block.scales_h >> (2 * ib)) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace petrel::quant
