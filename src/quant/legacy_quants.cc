// The 32-element block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q8_1: ggml's reference
// quantizers (round to nearest in the block's own scale) and exact dequantizers.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/formats.h"

namespace petrel::quant {
namespace {

// The element of largest magnitude in x[0, n), with its sign (the first one on ties).
float SignedAbsMax(const float* x, size_t n) {
  float amax = 0.0f, max = 0.0f;
  for (size_t j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void MinMax(const float* x, size_t n, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (size_t j = 0; j < n; ++j) {
    *min = std::min(*min, x[j]);
    *max = std::max(*max, x[j]);
  }
}

}  // namespace

void DequantizeQ4_0(const void* src, float* dst, size_t n) {
  const BlockQ4_0* blocks = static_cast<const BlockQ4_0*>(src);
  for (size_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = F16ToF32(blocks[i].d);
    for (size_t j = 0; j < kQK / 2; ++j) {
      dst[j] = float((blocks[i].qs[j] & 0x0F) - 8) * d;
      dst[j + 16] = float((blocks[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void QuantizeQ4_0(const float* src, void* dst, size_t n) {
  BlockQ4_0* blocks = static_cast<BlockQ4_0*>(dst);
  for (size_t i = 0; i < n / kQK; ++i, src += kQK) {
    const float d = SignedAbsMax(src, kQK) / -8;
    const float id = d ? 1.0f / d : 0.0f;
    blocks[i].d = F32ToF16(d);
    for (size_t j = 0; j < kQK / 2; ++j) {
      // The cast truncates; +8.5 makes it round to nearest. Only max/d = -8 can reach 16.
      const uint8_t q0 = std::min<int>(15, int8_t(src[j] * id + 8.5f));
      const uint8_t q1 = std::min<int>(15, int8_t(src[j + 16] * id + 8.5f));
      blocks[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void DequantizeQ4_1(const void* src, float* dst, size_t n) {
  const BlockQ4_1* blocks = static_cast<const BlockQ4_1*>(src);
  for (size_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = F16ToF32(blocks[i].d), m = F16ToF32(blocks[i].m);
    for (size_t j = 0; j < kQK / 2; ++j) {
      dst[j] = float(blocks[i].qs[j] & 0x0F) * d + m;
      dst[j + 16] = float(blocks[i].qs[j] >> 4) * d + m;
    }
  }
}

void QuantizeQ4_1(const float* src, void* dst, size_t n) {
  BlockQ4_1* blocks = static_cast<BlockQ4_1*>(dst);
  for (size_t i = 0; i < n / kQK; ++i, src += kQK) {
    float min, max;
    MinMax(src, kQK, &min, &max);
    const float d = (max - min) / 15;
    const float id = d ? 1.0f / d : 0.0f;
    blocks[i].d = F32ToF16(d);
    blocks[i].m = F32ToF16(min);
    for (size_t j = 0; j < kQK / 2; ++j) {
      const uint8_t q0 = std::min<int>(15, int8_t((src[j] - min) * id + 0.5f));
      const uint8_t q1 = std::min<int>(15, int8_t((src[j + 16] - min) * id + 0.5f));
      blocks[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void DequantizeQ5_0(const void* src, float* dst, size_t n) {
  const BlockQ5_0* blocks = static_cast<const BlockQ5_0*>(src);
  for (size_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = F16ToF32(blocks[i].d);
    uint32_t qh;
    std::memcpy(&qh, blocks[i].qh, sizeof(qh));
    for (size_t j = 0; j < kQK / 2; ++j) {
      const int high0 = ((qh >> j) << 4) & 0x10;
      const int high1 = (qh >> (j + 12)) & 0x10;
      dst[j] = float(((blocks[i].qs[j] & 0x0F) | high0) - 16) * d;
      dst[j + 16] = float(((blocks[i].qs[j] >> 4) | high1) - 16) * d;
    }
  }
}

void QuantizeQ5_0(const float* src, void* dst, size_t n) {
  BlockQ5_0* blocks = static_cast<BlockQ5_0*>(dst);
  for (size_t i = 0; i < n / kQK; ++i, src += kQK) {
    const float d = SignedAbsMax(src, kQK) / -16;
    const float id = d ? 1.0f / d : 0.0f;
    blocks[i].d = F32ToF16(d);
    uint32_t qh = 0;
    for (size_t j = 0; j < kQK / 2; ++j) {
      const uint8_t q0 = std::min<int>(31, int8_t(src[j] * id + 16.5f));
      const uint8_t q1 = std::min<int>(31, int8_t(src[j + 16] * id + 16.5f));
      blocks[i].qs[j] = uint8_t((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= uint32_t((q0 & 0x10u) >> 4) << j;
      qh |= uint32_t((q1 & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(blocks[i].qh, &qh, sizeof(qh));
  }
}

void DequantizeQ5_1(const void* src, float* dst, size_t n) {
  const BlockQ5_1* blocks = static_cast<const BlockQ5_1*>(src);
  for (size_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = F16ToF32(blocks[i].d), m = F16ToF32(blocks[i].m);
    uint32_t qh;
    std::memcpy(&qh, blocks[i].qh, sizeof(qh));
    for (size_t j = 0; j < kQK / 2; ++j) {
      const int high0 = ((qh >> j) << 4) & 0x10;
      const int high1 = (qh >> (j + 12)) & 0x10;
      dst[j] = float((blocks[i].qs[j] & 0x0F) | high0) * d + m;
      dst[j + 16] = float((blocks[i].qs[j] >> 4) | high1) * d + m;
    }
  }
}

void QuantizeQ5_1(const float* src, void* dst, size_t n) {
  BlockQ5_1* blocks = static_cast<BlockQ5_1*>(dst);
  for (size_t i = 0; i < n / kQK; ++i, src += kQK) {
    float min, max;
    MinMax(src, kQK, &min, &max);
    const float d = (max - min) / 31;
    const float id = d ? 1.0f / d : 0.0f;
    blocks[i].d = F32ToF16(d);
    blocks[i].m = F32ToF16(min);
    uint32_t qh = 0;
    for (size_t j = 0; j < kQK / 2; ++j) {
      const uint8_t q0 = uint8_t((src[j] - min) * id + 0.5f);
      const uint8_t q1 = uint8_t((src[j + 16] - min) * id + 0.5f);
      blocks[i].qs[j] = uint8_t((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= uint32_t((q0 & 0x10u) >> 4) << j;
      qh |= uint32_t((q1 & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(blocks[i].qh, &qh, sizeof(qh));
  }
}

namespace {

// Q8_0 and Q8_1 share their scale and levels; Q8_1 adds the sum of its levels times the scale.
template <class Block>
void DequantizeQ8(const void* src, float* dst, size_t n) {
  const Block* blocks = static_cast<const Block*>(src);
  for (size_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = F16ToF32(blocks[i].d);
    for (size_t j = 0; j < kQK; ++j) dst[j] = float(blocks[i].qs[j]) * d;
  }
}

// Writes block.d and block.qs for kQK values; returns the scale.
template <class Block>
float QuantizeQ8Block(const float* src, Block& block) {
  float amax = 0.0f;
  for (size_t j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(src[j]));
  const float d = amax / 127;
  const float id = d ? 1.0f / d : 0.0f;
  block.d = F32ToF16(d);
  // roundf: halves away from zero, as ggml's reference (its AVX path rounds them to even).
  for (size_t j = 0; j < kQK; ++j) block.qs[j] = int8_t(std::roundf(src[j] * id));
  return d;
}

}  // namespace

void DequantizeQ8_0(const void* src, float* dst, size_t n) { DequantizeQ8<BlockQ8_0>(src, dst, n); }

void QuantizeQ8_0(const float* src, void* dst, size_t n) {
  BlockQ8_0* blocks = static_cast<BlockQ8_0*>(dst);
  for (size_t i = 0; i < n / kQK; ++i, src += kQK) QuantizeQ8Block(src, blocks[i]);
}

void DequantizeQ8_1(const void* src, float* dst, size_t n) { DequantizeQ8<BlockQ8_1>(src, dst, n); }

void QuantizeQ8_1(const float* src, void* dst, size_t n) {
  BlockQ8_1* blocks = static_cast<BlockQ8_1*>(dst);
  for (size_t i = 0; i < n / kQK; ++i, src += kQK) {
    const float d = QuantizeQ8Block(src, blocks[i]);
    int sum = 0;
    for (size_t j = 0; j < kQK; ++j) sum += blocks[i].qs[j];
    blocks[i].s = F32ToF16(float(sum) * d);
  }
}

}  // namespace petrel::quant
