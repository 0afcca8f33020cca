// Q2_K and Q3_K: 2- and 3-bit super-blocks of 256 with sixteen 16-element sub-blocks.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/formats.h"

namespace petrel::quant {

void DequantizeQ2_K(const void* src, float* dst, size_t n) {
  const BlockQ2_K* blocks = static_cast<const BlockQ2_K*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(blocks[i].d), dmin = F16ToF32(blocks[i].dmin);
    const uint8_t* q = blocks[i].qs;
    size_t is = 0;
    // Each 32 bytes of qs hold 128 elements: four 2-bit planes of 32, each two sub-blocks of 16.
    for (size_t half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (size_t k = 0; k < 2; ++k) {
          const uint8_t sc = blocks[i].scales[is++];
          const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
          for (size_t l = 0; l < 16; ++l) *dst++ = dl * float((q[l + 16 * k] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void QuantizeQ2_K(const float* src, void* dst, size_t n) {
  BlockQ2_K* blocks = static_cast<BlockQ2_K*>(dst);
  uint8_t levels[kQK_K], levels_aux[16];
  float weights[16], mins[kQK_K / 16], scales[kQK_K / 16];
  const float q4scale = 15.f;
  for (size_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    BlockQ2_K& y = blocks[i];
    float max_scale = 0, max_min = 0;
    for (size_t j = 0; j < kQK_K / 16; ++j) {
      for (size_t l = 0; l < 16; ++l) weights[l] = std::fabs(src[16 * j + l]);
      scales[j] = MakeQkx2Quants(16, 3, src + 16 * j, weights, levels + 16 * j, &mins[j],
                                 levels_aux, -0.5f, 0.1f, 15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (size_t j = 0; j < kQK_K / 16; ++j) y.scales[j] = uint8_t(NearestInt(iscale * scales[j]));
      y.d = F32ToF16(max_scale / q4scale);
    } else {
      std::memset(y.scales, 0, sizeof(y.scales));
      y.d = F32ToF16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (size_t j = 0; j < kQK_K / 16; ++j) {
        y.scales[j] |= uint8_t(NearestInt(iscale * mins[j]) << 4);
      }
      y.dmin = F32ToF16(max_min / q4scale);
    } else {
      y.dmin = F32ToF16(0.f);
    }
    // Re-round every element against the stored (rounded) scales.
    for (size_t j = 0; j < kQK_K / 16; ++j) {
      const float d = F16ToF32(y.d) * float(y.scales[j] & 0xF);
      if (!d) continue;
      const float dm = F16ToF32(y.dmin) * float(y.scales[j] >> 4);
      for (size_t l = 0; l < 16; ++l) {
        const int q = NearestInt((src[16 * j + l] + dm) / d);
        levels[16 * j + l] = uint8_t(std::max(0, std::min(3, q)));
      }
    }
    for (size_t j = 0; j < kQK_K; j += 128) {
      for (size_t l = 0; l < 32; ++l) {
        y.qs[j / 4 + l] = uint8_t(levels[j + l] | (levels[j + l + 32] << 2) |
                                  (levels[j + l + 64] << 4) | (levels[j + l + 96] << 6));
      }
    }
  }
}

void DequantizeQ3_K(const void* src, float* dst, size_t n) {
  const BlockQ3_K* blocks = static_cast<const BlockQ3_K*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = F16ToF32(blocks[i].d);
    int8_t scales[16];
    UnpackQ3KScales(blocks[i].scales, scales);
    const uint8_t* q = blocks[i].qs;
    const uint8_t* hm = blocks[i].hmask;
    uint8_t m = 1;
    size_t is = 0;
    for (size_t half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
        for (size_t k = 0; k < 2; ++k) {
          const float dl = d_all * float(scales[is++]);
          for (size_t l = 0; l < 16; ++l) {
            const int low = (q[l + 16 * k] >> shift) & 3;
            const int high = (hm[l + 16 * k] & m) ? 0 : 4;
            *dst++ = dl * float(low - high);
          }
        }
      }
    }
  }
}

void QuantizeQ3_K(const float* src, void* dst, size_t n) {
  BlockQ3_K* blocks = static_cast<BlockQ3_K*>(dst);
  int8_t levels[kQK_K];
  float scales[kQK_K / 16];
  for (size_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    BlockQ3_K& y = blocks[i];
    float max_scale = 0, amax = 0;
    for (size_t j = 0; j < kQK_K / 16; ++j) {
      scales[j] = MakeQ3Quants(16, 4, src + 16 * j, levels + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::memset(y.scales, 0, sizeof(y.scales));
    if (max_scale) {
      const float iscale = -32.f / max_scale;
      for (size_t j = 0; j < kQK_K / 16; ++j) {
        int8_t l = int8_t(NearestInt(iscale * scales[j]));
        l = int8_t(std::max(-32, std::min(31, int(l))) + 32);
        if (j < 8) {
          y.scales[j] = uint8_t(l & 0xF);
        } else {
          y.scales[j - 8] |= uint8_t((l & 0xF) << 4);
        }
        l >>= 4;
        y.scales[j % 4 + 8] |= uint8_t(l << (2 * (j / 4)));
      }
      y.d = F32ToF16(1 / iscale);
    } else {
      y.d = F32ToF16(0.f);
    }
    int8_t stored[16];
    UnpackQ3KScales(y.scales, stored);
    for (size_t j = 0; j < kQK_K / 16; ++j) {
      const float d = F16ToF32(y.d) * float(stored[j]);
      if (!d) continue;
      for (size_t l = 0; l < 16; ++l) {
        const int q = NearestInt(src[16 * j + l] / d);
        levels[16 * j + l] = int8_t(std::max(-4, std::min(3, q)) + 4);
      }
    }
    // The high bit of element j goes to bit j / 32 of hmask[j % 32].
    std::memset(y.hmask, 0, sizeof(y.hmask));
    for (size_t j = 0; j < kQK_K; ++j) {
      if (levels[j] > 3) {
        y.hmask[j % 32] |= uint8_t(1 << (j / 32));
        levels[j] = int8_t(levels[j] - 4);
      }
    }
    for (size_t j = 0; j < kQK_K; j += 128) {
      for (size_t l = 0; l < 32; ++l) {
        y.qs[j / 4 + l] = uint8_t(levels[j + l] | (levels[j + l + 32] << 2) |
                                  (levels[j + l + 64] << 4) | (levels[j + l + 96] << 6));
      }
    }
  }
}

}  // namespace petrel::quant
