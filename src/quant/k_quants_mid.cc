// Q4_K and Q5_K: 4- and 5-bit super-blocks of 256 with eight 32-element sub-blocks, each with a
// 6-bit scale and a 6-bit min.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/formats.h"

namespace petrel::quant {
namespace {

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fits each sub-block, stores d/dmin and the packed
// 6-bit scales and mins, and fills `levels` (256) rounded against the stored scales.
void QuantizeK4Scales(const float* src, int nmax, float rmin, int nstep, uint16_t* d_out,
                      uint16_t* dmin_out, uint8_t* packed /* (12) */, uint8_t* levels) {
  uint8_t levels_aux[32];
  float weights[32], mins[kQK_K / 32], scales[kQK_K / 32];
  float max_scale = 0, max_min = 0;
  for (size_t j = 0; j < kQK_K / 32; ++j) {
    float sum_x2 = 0;
    for (size_t l = 0; l < 32; ++l) sum_x2 += src[32 * j + l] * src[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (size_t l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(src[32 * j + l]);
    scales[j] = MakeQkx2Quants(32, nmax, src + 32 * j, weights, levels + 32 * j, &mins[j],
                               levels_aux, rmin, 0.1f, nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(packed, 0, 12);
  for (size_t j = 0; j < kQK_K / 32; ++j) {
    const uint8_t ls = std::min<uint8_t>(63, uint8_t(NearestInt(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, uint8_t(NearestInt(inv_min * mins[j])));
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      packed[j - 4] |= uint8_t((ls >> 4) << 6);
      packed[j] |= uint8_t((lm >> 4) << 6);
    }
  }
  *d_out = F32ToF16(max_scale / 63.f);
  *dmin_out = F32ToF16(max_min / 63.f);
  for (size_t j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    ScaleMinK4(j, packed, &sc, &m);
    const float d = F16ToF32(*d_out) * float(sc);
    if (!d) continue;
    const float dm = F16ToF32(*dmin_out) * float(m);
    for (size_t l = 0; l < 32; ++l) {
      const int q = NearestInt((src[32 * j + l] + dm) / d);
      levels[32 * j + l] = uint8_t(std::max(0, std::min(nmax, q)));
    }
  }
}

}  // namespace

void DequantizeQ4_K(const void* src, float* dst, size_t n) {
  const BlockQ4_K* blocks = static_cast<const BlockQ4_K*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(blocks[i].d), min = F16ToF32(blocks[i].dmin);
    const uint8_t* q = blocks[i].qs;
    // Each 32 bytes hold 64 elements: sub-block 2k in the low nibbles, 2k + 1 in the high ones.
    for (size_t j = 0; j < kQK_K / 64; ++j, q += 32) {
      uint8_t sc, m;
      ScaleMinK4(2 * j, blocks[i].scales, &sc, &m);
      const float d1 = d * float(sc), m1 = min * float(m);
      ScaleMinK4(2 * j + 1, blocks[i].scales, &sc, &m);
      const float d2 = d * float(sc), m2 = min * float(m);
      for (size_t l = 0; l < 32; ++l) *dst++ = d1 * float(q[l] & 0xF) - m1;
      for (size_t l = 0; l < 32; ++l) *dst++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void QuantizeQ4_K(const float* src, void* dst, size_t n) {
  BlockQ4_K* blocks = static_cast<BlockQ4_K*>(dst);
  uint8_t levels[kQK_K];
  for (size_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    BlockQ4_K& y = blocks[i];
    QuantizeK4Scales(src, 15, -1.f, 20, &y.d, &y.dmin, y.scales, levels);
    uint8_t* q = y.qs;
    for (size_t j = 0; j < kQK_K; j += 64, q += 32) {
      for (size_t l = 0; l < 32; ++l) q[l] = uint8_t(levels[j + l] | (levels[j + l + 32] << 4));
    }
  }
}

void DequantizeQ5_K(const void* src, float* dst, size_t n) {
  const BlockQ5_K* blocks = static_cast<const BlockQ5_K*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(blocks[i].d), min = F16ToF32(blocks[i].dmin);
    const uint8_t* ql = blocks[i].qs;
    const uint8_t* qh = blocks[i].qh;
    uint8_t u1 = 1, u2 = 2;
    for (size_t j = 0; j < kQK_K / 64; ++j, ql += 32, u1 <<= 2, u2 <<= 2) {
      uint8_t sc, m;
      ScaleMinK4(2 * j, blocks[i].scales, &sc, &m);
      const float d1 = d * float(sc), m1 = min * float(m);
      ScaleMinK4(2 * j + 1, blocks[i].scales, &sc, &m);
      const float d2 = d * float(sc), m2 = min * float(m);
      for (size_t l = 0; l < 32; ++l) {
        *dst++ = d1 * float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      }
      for (size_t l = 0; l < 32; ++l) {
        *dst++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      }
    }
  }
}

void QuantizeQ5_K(const float* src, void* dst, size_t n) {
  BlockQ5_K* blocks = static_cast<BlockQ5_K*>(dst);
  uint8_t levels[kQK_K];
  for (size_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    BlockQ5_K& y = blocks[i];
    QuantizeK4Scales(src, 31, -0.5f, 15, &y.d, &y.dmin, y.scales, levels);
    std::memset(y.qh, 0, sizeof(y.qh));
    uint8_t* ql = y.qs;
    uint8_t m1 = 1, m2 = 2;
    for (size_t j = 0; j < kQK_K; j += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
      for (size_t l = 0; l < 32; ++l) {
        int l1 = levels[j + l], l2 = levels[j + l + 32];
        if (l1 > 15) {
          l1 -= 16;
          y.qh[l] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          y.qh[l] |= m2;
        }
        ql[l] = uint8_t(l1 | (l2 << 4));
      }
    }
  }
}

}  // namespace petrel::quant
