// The ternary and sign formats: TQ1_0 and TQ2_0 (levels -1, 0, +1 times one f16 scale per 256
// elements, packed as base-3 digits or 2-bit fields), Q2_0 (2-bit levels -1..+2 per 64) and Q1_0
// (one sign bit per element, +-the block's mean magnitude, per 128). ggml's reference quantizers
// and exact decoders; the rounding of the quantizers (lroundf/roundf: halves away from zero) is
// part of what makes their bytes match llama-quantize's.
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/formats.h"

namespace petrel::quant {
namespace {

// TQ1_0 packs 5 base-3 digits in a byte as ceil(value * 256 / 243): digit k (0 = most
// significant) is recovered by multiplying by 3^k modulo 256, then taking the top of q * 3.
constexpr uint8_t kPow3[6] = {1, 3, 9, 27, 81, 243};

inline int TernaryDigit(uint8_t packed, size_t k) {
  const uint8_t shifted = uint8_t(packed * kPow3[k]);
  return (uint16_t(shifted) * 3) >> 8;
}

// The inverse: the digits (0, 1, 2), most significant first, as the byte TernaryDigit reads.
inline uint8_t PackTernary(uint32_t base3_value) {
  return uint8_t((base3_value * 256 + (243 - 1)) / 243);
}

float AbsMax(const float* x, size_t n) {
  float amax = 0.0f;
  for (size_t j = 0; j < n; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
  return amax;
}

// The level (0, 1, 2 for -1, 0, +1) of x in units of 1/id, rounded half away from zero.
inline int TernaryLevel(float x, float id) { return int(std::lround(x * id)) + 1; }

}  // namespace

void DequantizeTQ1_0(const void* src, float* dst, size_t n) {
  const BlockTQ1_0* blocks = static_cast<const BlockTQ1_0*>(src);
  constexpr size_t kQsBytes = sizeof(BlockTQ1_0::qs);      // 48
  constexpr size_t kWideBytes = kQsBytes - kQsBytes % 32;  // 32 bytes in runs of 32
  constexpr size_t kQhBytes = sizeof(BlockTQ1_0::qh);      // 4
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(blocks[i].d);
    const uint8_t* qs = blocks[i].qs;
    // Bytes [0, 32): digit k of byte m is element 32 k + m of that 160-element run; bytes
    // [32, 48) likewise in runs of 16.
    for (size_t j = 0; j < kWideBytes; j += 32) {
      for (size_t k = 0; k < 5; ++k) {
        for (size_t m = 0; m < 32; ++m) *dst++ = float(TernaryDigit(qs[j + m], k) - 1) * d;
      }
    }
    for (size_t j = kWideBytes; j < kQsBytes; j += 16) {
      for (size_t k = 0; k < 5; ++k) {
        for (size_t m = 0; m < 16; ++m) *dst++ = float(TernaryDigit(qs[j + m], k) - 1) * d;
      }
    }
    for (size_t k = 0; k < 4; ++k) {
      for (size_t j = 0; j < kQhBytes; ++j) {
        *dst++ = float(TernaryDigit(blocks[i].qh[j], k) - 1) * d;
      }
    }
  }
}

void QuantizeTQ1_0(const float* src, void* dst, size_t n) {
  BlockTQ1_0* blocks = static_cast<BlockTQ1_0*>(dst);
  constexpr size_t kQsBytes = sizeof(BlockTQ1_0::qs);
  constexpr size_t kWideBytes = kQsBytes - kQsBytes % 32;
  constexpr size_t kQhBytes = sizeof(BlockTQ1_0::qh);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = AbsMax(src, kQK_K);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[i].d = F32ToF16(d);
    for (size_t j = 0; j < kWideBytes; j += 32, src += 5 * 32) {
      for (size_t m = 0; m < 32; ++m) {
        uint32_t value = 0;
        for (size_t k = 0; k < 5; ++k) value = value * 3 + TernaryLevel(src[m + 32 * k], id);
        blocks[i].qs[j + m] = PackTernary(value);
      }
    }
    for (size_t j = kWideBytes; j < kQsBytes; j += 16, src += 5 * 16) {
      for (size_t m = 0; m < 16; ++m) {
        uint32_t value = 0;
        for (size_t k = 0; k < 5; ++k) value = value * 3 + TernaryLevel(src[m + 16 * k], id);
        blocks[i].qs[j + m] = PackTernary(value);
      }
    }
    // Four digits per byte, the fifth (least significant) zero.
    for (size_t j = 0; j < kQhBytes; ++j) {
      uint32_t value = 0;
      for (size_t k = 0; k < 4; ++k) value = value * 3 + TernaryLevel(src[j + kQhBytes * k], id);
      blocks[i].qh[j] = PackTernary(value * 3);
    }
    src += 4 * kQhBytes;
  }
}

void DequantizeTQ2_0(const void* src, float* dst, size_t n) {
  const BlockTQ2_0* blocks = static_cast<const BlockTQ2_0*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(blocks[i].d);
    // Per 32 bytes, 128 elements: field l of byte m is element 32 l + m.
    for (size_t j = 0; j < sizeof(BlockTQ2_0::qs); j += 32) {
      for (size_t l = 0; l < 4; ++l) {
        for (size_t m = 0; m < 32; ++m) {
          const int level = (blocks[i].qs[j + m] >> (2 * l)) & 3;
          *dst++ = float(level - 1) * d;
        }
      }
    }
  }
}

void QuantizeTQ2_0(const float* src, void* dst, size_t n) {
  BlockTQ2_0* blocks = static_cast<BlockTQ2_0*>(dst);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = AbsMax(src, kQK_K);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[i].d = F32ToF16(d);
    for (size_t j = 0; j < sizeof(BlockTQ2_0::qs); j += 32, src += 4 * 32) {
      for (size_t m = 0; m < 32; ++m) {
        uint32_t packed = 0;
        for (size_t l = 0; l < 4; ++l) {
          packed |= uint32_t(TernaryLevel(src[m + 32 * l], id) & 3) << (2 * l);
        }
        blocks[i].qs[j + m] = uint8_t(packed);
      }
    }
  }
}

void DequantizeQ1_0(const void* src, float* dst, size_t n) {
  const BlockQ1_0* blocks = static_cast<const BlockQ1_0*>(src);
  for (size_t i = 0; i < n / kQK1_0; ++i, dst += kQK1_0) {
    const float d = F16ToF32(blocks[i].d);
    for (size_t j = 0; j < kQK1_0; ++j) dst[j] = (blocks[i].qs[j / 8] >> (j % 8)) & 1 ? d : -d;
  }
}

void QuantizeQ1_0(const float* src, void* dst, size_t n) {
  BlockQ1_0* blocks = static_cast<BlockQ1_0*>(dst);
  for (size_t i = 0; i < n / kQK1_0; ++i, src += kQK1_0) {
    float sum_abs = 0.0f;
    for (size_t j = 0; j < kQK1_0; ++j) sum_abs += std::fabs(src[j]);
    blocks[i].d = F32ToF16(sum_abs / float(kQK1_0));
    std::memset(blocks[i].qs, 0, sizeof(blocks[i].qs));
    for (size_t j = 0; j < kQK1_0; ++j) {
      if (src[j] >= 0.0f) blocks[i].qs[j / 8] |= uint8_t(1u << (j % 8));
    }
  }
}

void DequantizeQ2_0(const void* src, float* dst, size_t n) {
  const BlockQ2_0* blocks = static_cast<const BlockQ2_0*>(src);
  for (size_t i = 0; i < n / kQK2_0; ++i, dst += kQK2_0) {
    const float d = F16ToF32(blocks[i].d);
    for (size_t j = 0; j < kQK2_0; ++j) {
      const int level = (blocks[i].qs[j / 4] >> (2 * (j % 4))) & 3;
      dst[j] = float(level - 1) * d;
    }
  }
}

void QuantizeQ2_0(const float* src, void* dst, size_t n) {
  BlockQ2_0* blocks = static_cast<BlockQ2_0*>(dst);
  for (size_t i = 0; i < n / kQK2_0; ++i, src += kQK2_0) {
    float amax = 0.0f;
    for (size_t j = 0; j < kQK2_0; ++j) {
      if (std::fabs(src[j]) > amax) amax = std::fabs(src[j]);
    }
    const float id = amax > 0.0f ? 1.0f / amax : 0.0f;
    blocks[i].d = F32ToF16(amax);
    std::memset(blocks[i].qs, 0, sizeof(blocks[i].qs));
    for (size_t j = 0; j < kQK2_0; ++j) {
      // Levels -1, 0, +1, +2 stored as 0..3.
      int level = int(std::round(src[j] * id)) + 1;
      level = level < 0 ? 0 : level > 3 ? 3 : level;
      blocks[i].qs[j / 4] |= uint8_t(level << (2 * (j % 4)));
    }
  }
}

}  // namespace petrel::quant
