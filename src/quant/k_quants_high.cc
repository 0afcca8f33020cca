// Q6_K (6-bit weights, sixteen 8-bit sub-block scales) and Q8_K (the 8-bit activation format of
// the K-quant dot products, with f32 scale and per-16 sums).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/formats.h"

namespace petrel::quant {

void DequantizeQ6_K(const void* src, float* dst, size_t n) {
  const BlockQ6_K* blocks = static_cast<const BlockQ6_K*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(blocks[i].d);
    const uint8_t* ql = blocks[i].ql;
    const uint8_t* qh = blocks[i].qh;
    const int8_t* sc = blocks[i].scales;
    // Each 128 elements: 64 bytes of low nibbles, 32 bytes of 2-bit high parts, 8 scales.
    for (size_t half = 0; half < 2; ++half, dst += 128, ql += 64, qh += 32, sc += 8) {
      for (size_t l = 0; l < 32; ++l) {
        const size_t is = l / 16;
        const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l] = d * float(sc[is]) * float(q1);
        dst[l + 32] = d * float(sc[is + 2]) * float(q2);
        dst[l + 64] = d * float(sc[is + 4]) * float(q3);
        dst[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

namespace {

// `importance` (null: none) weights each sub-block's scale search; the rest is the same.
void QuantizeQ6_KImpl(const float* src, void* dst, size_t n, const float* importance) {
  BlockQ6_K* blocks = static_cast<BlockQ6_K*>(dst);
  int8_t levels[kQK_K];
  float scales[kQK_K / 16];
  for (size_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    BlockQ6_K& y = blocks[i];
    float max_scale = 0, max_abs_scale = 0;
    for (size_t ib = 0; ib < kQK_K / 16; ++ib) {
      const float* weights = importance ? importance + i * kQK_K + 16 * ib : nullptr;
      scales[ib] = MakeQxQuants(16, 32, src + 16 * ib, levels + 16 * ib, 1, weights);
      const float abs_scale = std::fabs(scales[ib]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y, 0, sizeof(y));
      y.d = F32ToF16(0.f);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y.d = F32ToF16(1 / iscale);
    for (size_t ib = 0; ib < kQK_K / 16; ++ib) {
      y.scales[ib] = int8_t(std::min(127, NearestInt(iscale * scales[ib])));
    }
    for (size_t j = 0; j < kQK_K / 16; ++j) {
      const float d = F16ToF32(y.d) * float(y.scales[j]);
      if (!d) continue;
      for (size_t l = 0; l < 16; ++l) {
        const int q = NearestInt(src[16 * j + l] / d);
        levels[16 * j + l] = int8_t(std::max(-32, std::min(31, q)) + 32);
      }
    }
    uint8_t* ql = y.ql;
    uint8_t* qh = y.qh;
    for (size_t j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (size_t l = 0; l < 32; ++l) {
        const uint8_t q1 = levels[j + l] & 0xF, q2 = levels[j + l + 32] & 0xF;
        const uint8_t q3 = levels[j + l + 64] & 0xF, q4 = levels[j + l + 96] & 0xF;
        ql[l] = uint8_t(q1 | (q3 << 4));
        ql[l + 32] = uint8_t(q2 | (q4 << 4));
        qh[l] = uint8_t((levels[j + l] >> 4) | ((levels[j + l + 32] >> 4) << 2) |
                        ((levels[j + l + 64] >> 4) << 4) | ((levels[j + l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

void QuantizeQ6_K(const float* src, void* dst, size_t n) {
  QuantizeQ6_KImpl(src, dst, n, nullptr);
}

void QuantizeQ6_KWeighted(const float* src, void* dst, size_t n, const float* importance) {
  QuantizeQ6_KImpl(src, dst, n, importance);
}

void DequantizeQ8_K(const void* src, float* dst, size_t n) {
  const BlockQ8_K* blocks = static_cast<const BlockQ8_K*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i, dst += kQK_K) {
    for (size_t j = 0; j < kQK_K; ++j) dst[j] = blocks[i].d * float(blocks[i].qs[j]);
  }
}

void QuantizeQ8_K(const float* src, void* dst, size_t n) {
  BlockQ8_K* blocks = static_cast<BlockQ8_K*>(dst);
  for (size_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    BlockQ8_K& y = blocks[i];
    float max = 0, amax = 0;
    for (size_t j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(src[j]);
      if (ax > amax) {
        amax = ax;
        max = src[j];
      }
    }
    if (!amax) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    const float iscale = -127.f / max;
    for (size_t j = 0; j < kQK_K; ++j) {
      y.qs[j] = int8_t(std::min(127, NearestInt(iscale * src[j])));
    }
    for (size_t j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (size_t l = 0; l < 16; ++l) sum += y.qs[16 * j + l];
      y.bsums[j] = int16_t(sum);
    }
    y.d = 1 / iscale;
  }
}

}  // namespace petrel::quant
