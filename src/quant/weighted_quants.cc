// The importance-matrix quantizers of the 32-block formats and of Q2_K..Q5_K (ggml's
// `quantize_row_*_impl` with `quant_weights`). Each element's squared error is weighted by
// importance * sqrt(sigma2 + x^2): the importance of its input column times a term that still
// favours large weights, sigma2 being (twice, for most types) the mean x^2 of the row or
// super-block. The block layouts are those of the reference quantizers; only the search differs.
// (Q6_K and IQ4 take the importance inside their own files: their searches already match.)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/formats.h"

namespace petrel::quant {
namespace {

float MeanSquare(const float* x, size_t n) {
  float sum = 0;
  for (size_t j = 0; j < n; ++j) sum += x[j] * x[j];
  return sum / float(n);
}

void Weights(const float* x, const float* importance, float sigma2, size_t n, float* weights) {
  for (size_t j = 0; j < n; ++j) weights[j] = importance[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

// Q4_1 (nmax 15) and Q5_1 (nmax 31): levels in [0, nmax] with a min.
template <class Block, int kNmax>
void QuantizeAsymmetric32(const float* src, Block* blocks, size_t n, const float* importance,
                          uint8_t* levels /* (n) */) {
  const float sigma2 = MeanSquare(src, n);
  float weights[kQK];
  uint8_t levels_aux[kQK];
  for (size_t ib = 0; ib < n / kQK; ++ib) {
    const float* xb = src + ib * kQK;
    Weights(xb, importance + ib * kQK, sigma2, kQK, weights);
    float min;
    const float d = MakeQkx2Quants(int(kQK), kNmax, xb, weights, levels + ib * kQK, &min,
                                   levels_aux, -0.9f, 0.05f, 36, false);
    blocks[ib].d = F32ToF16(d);
    blocks[ib].m = F32ToF16(-min);
  }
}

// Packs 5-bit levels of one 32-block as Q5_0/Q5_1 store them: low nibbles in qs, bit 4 in qh.
template <class Block>
void PackQ5(const uint8_t* levels, Block& block) {
  uint32_t qh = 0;
  for (size_t j = 0; j < kQK / 2; ++j) {
    const uint8_t q0 = levels[j], q1 = levels[j + kQK / 2];
    block.qs[j] = uint8_t((q0 & 0x0F) | ((q1 & 0x0F) << 4));
    qh |= uint32_t((q0 & 0x10u) >> 4) << j;
    qh |= uint32_t((q1 & 0x10u) >> 4) << (j + kQK / 2);
  }
  std::memcpy(block.qh, &qh, sizeof(qh));
}

// Q4_K (nmax 15) and Q5_K (nmax 31): each 32-element sub-block fitted with a min, then the eight
// scales and eight mins quantized to 6 bits by an importance-weighted fit (MakeQpQuants) rather
// than against their maximum; `levels` (256) rounded against the stored scales.
void QuantizeK4ScalesWeighted(const float* src, const float* importance, int nmax, uint16_t* d_out,
                              uint16_t* dmin_out, uint8_t* packed /* (12) */, uint8_t* levels) {
  constexpr size_t kSub = kQK_K / 32;
  uint8_t levels_aux[32], ls[kSub], lm[kSub];
  float weights[32], mins[kSub], scales[kSub], sub_weight[kSub];
  const float sigma2 = 2 * MeanSquare(src, kQK_K);
  for (size_t j = 0; j < kSub; ++j) {
    Weights(src + 32 * j, importance + 32 * j, sigma2, 32, weights);
    sub_weight[j] = 0;
    for (size_t l = 0; l < 32; ++l) sub_weight[j] += weights[l];
    scales[j] = MakeQkx2Quants(32, nmax, src + 32 * j, weights, levels + 32 * j, &mins[j],
                               levels_aux, -0.9f, 0.05f, 36, false);
  }
  const float d_block = MakeQpQuants(int(kSub), 63, scales, ls, sub_weight);
  const float m_block = MakeQpQuants(int(kSub), 63, mins, lm, sub_weight);
  std::memset(packed, 0, 12);
  for (size_t j = 0; j < kSub; ++j) {
    if (j < 4) {
      packed[j] = ls[j];
      packed[j + 4] = lm[j];
    } else {
      packed[j + 4] = uint8_t((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      packed[j - 4] |= uint8_t((ls[j] >> 4) << 6);
      packed[j] |= uint8_t((lm[j] >> 4) << 6);
    }
  }
  *d_out = F32ToF16(d_block);
  *dmin_out = F32ToF16(m_block);
  for (size_t j = 0; j < kSub; ++j) {
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

void QuantizeQ4_0Weighted(const float* src, void* dst, size_t n, const float* importance) {
  BlockQ4_0* blocks = static_cast<BlockQ4_0*>(dst);
  int8_t levels[kQK];
  const float sigma2 = MeanSquare(src, n);
  float weights[kQK];
  for (size_t ib = 0; ib < n / kQK; ++ib) {
    const float* xb = src + ib * kQK;
    Weights(xb, importance + ib * kQK, sigma2, kQK, weights);
    blocks[ib].d = F32ToF16(MakeQxQuants(int(kQK), 8, xb, levels, 1, weights));
    for (size_t j = 0; j < kQK / 2; ++j) {
      blocks[ib].qs[j] = uint8_t(levels[j] | (levels[j + kQK / 2] << 4));
    }
  }
}

void QuantizeQ5_0Weighted(const float* src, void* dst, size_t n, const float* importance) {
  BlockQ5_0* blocks = static_cast<BlockQ5_0*>(dst);
  const float sigma2 = MeanSquare(src, n);
  float weights[kQK];
  int8_t levels[kQK];
  uint8_t unsigned_levels[kQK];
  for (size_t ib = 0; ib < n / kQK; ++ib) {
    const float* xb = src + ib * kQK;
    Weights(xb, importance + ib * kQK, sigma2, kQK, weights);
    blocks[ib].d = F32ToF16(MakeQxQuants(int(kQK), 16, xb, levels, 1, weights));
    for (size_t j = 0; j < kQK; ++j) unsigned_levels[j] = uint8_t(levels[j]);
    PackQ5(unsigned_levels, blocks[ib]);
  }
}

void QuantizeQ4_1Weighted(const float* src, void* dst, size_t n, const float* importance) {
  BlockQ4_1* blocks = static_cast<BlockQ4_1*>(dst);
  std::vector<uint8_t> levels(n);
  QuantizeAsymmetric32<BlockQ4_1, 15>(src, blocks, n, importance, levels.data());
  for (size_t ib = 0; ib < n / kQK; ++ib) {
    const uint8_t* lb = levels.data() + ib * kQK;
    for (size_t j = 0; j < kQK / 2; ++j) blocks[ib].qs[j] = uint8_t(lb[j] | (lb[j + kQK / 2] << 4));
  }
}

void QuantizeQ5_1Weighted(const float* src, void* dst, size_t n, const float* importance) {
  BlockQ5_1* blocks = static_cast<BlockQ5_1*>(dst);
  std::vector<uint8_t> levels(n);
  QuantizeAsymmetric32<BlockQ5_1, 31>(src, blocks, n, importance, levels.data());
  for (size_t ib = 0; ib < n / kQK; ++ib) PackQ5(levels.data() + ib * kQK, blocks[ib]);
}

void QuantizeQ2_KWeighted(const float* src, void* dst, size_t n, const float* importance) {
  BlockQ2_K* blocks = static_cast<BlockQ2_K*>(dst);
  constexpr size_t kSub = kQK_K / 16;
  uint8_t levels[kQK_K], levels_aux[16], ls[kSub], lm[kSub];
  float weights[16], mins[kSub], scales[kSub], sub_weight[kSub];
  for (size_t i = 0; i < n / kQK_K; ++i, src += kQK_K, importance += kQK_K) {
    BlockQ2_K& y = blocks[i];
    const float sigma2 = MeanSquare(src, kQK_K);  // Q2_K: not doubled
    for (size_t j = 0; j < kSub; ++j) {
      Weights(src + 16 * j, importance + 16 * j, sigma2, 16, weights);
      sub_weight[j] = 0;
      for (size_t l = 0; l < 16; ++l) sub_weight[j] += weights[l];
      scales[j] = MakeQkx2Quants(16, 3, src + 16 * j, weights, levels + 16 * j, &mins[j],
                                 levels_aux, -0.9f, 0.05f, 36, false);
    }
    y.d = F32ToF16(MakeQpQuants(int(kSub), 15, scales, ls, sub_weight));
    y.dmin = F32ToF16(MakeQpQuants(int(kSub), 15, mins, lm, sub_weight));
    const float dm = F16ToF32(y.d), mm = F16ToF32(y.dmin);
    for (size_t j = 0; j < kSub; ++j) y.scales[j] = uint8_t(ls[j] | (lm[j] << 4));
    for (size_t j = 0; j < kSub; ++j) {
      const float d = dm * float(y.scales[j] & 0xF);
      if (!d) continue;
      const float m = mm * float(y.scales[j] >> 4);
      for (size_t l = 0; l < 16; ++l) {
        const int q = NearestInt((src[16 * j + l] + m) / d);
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

void QuantizeQ3_KWeighted(const float* src, void* dst, size_t n, const float* importance) {
  BlockQ3_K* blocks = static_cast<BlockQ3_K*>(dst);
  constexpr size_t kSub = kQK_K / 16;
  int8_t levels[kQK_K], ls[kSub];
  float weights[16], scales[kSub], sub_weight[kSub];
  for (size_t i = 0; i < n / kQK_K; ++i, src += kQK_K, importance += kQK_K) {
    BlockQ3_K& y = blocks[i];
    const float sigma2 = 2 * MeanSquare(src, kQK_K);
    for (size_t j = 0; j < kSub; ++j) {
      Weights(src + 16 * j, importance + 16 * j, sigma2, 16, weights);
      sub_weight[j] = 0;
      for (size_t l = 0; l < 16; ++l) sub_weight[j] += weights[l];
      scales[j] = MakeQxQuants(16, 4, src + 16 * j, levels + 16 * j, 1, weights);
    }
    // The sixteen signed sub-block scales as 6-bit levels (stored + 32) of one block scale.
    std::memset(y.scales, 0, sizeof(y.scales));
    const float d_block = MakeQxQuants(int(kSub), 32, scales, ls, 1, sub_weight);
    for (size_t j = 0; j < kSub; ++j) {
      int l = ls[j];
      if (j < 8) {
        y.scales[j] = uint8_t(l & 0xF);
      } else {
        y.scales[j - 8] |= uint8_t((l & 0xF) << 4);
      }
      l >>= 4;
      y.scales[j % 4 + 8] |= uint8_t(l << (2 * (j / 4)));
    }
    y.d = F32ToF16(d_block);
    int8_t stored[16];
    UnpackQ3KScales(y.scales, stored);
    for (size_t j = 0; j < kSub; ++j) {
      const float d = F16ToF32(y.d) * float(stored[j]);
      if (!d) continue;
      for (size_t l = 0; l < 16; ++l) {
        const int q = NearestInt(src[16 * j + l] / d);
        levels[16 * j + l] = int8_t(std::max(-4, std::min(3, q)) + 4);
      }
    }
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

void QuantizeQ4_KWeighted(const float* src, void* dst, size_t n, const float* importance) {
  BlockQ4_K* blocks = static_cast<BlockQ4_K*>(dst);
  uint8_t levels[kQK_K];
  for (size_t i = 0; i < n / kQK_K; ++i, src += kQK_K, importance += kQK_K) {
    BlockQ4_K& y = blocks[i];
    QuantizeK4ScalesWeighted(src, importance, 15, &y.d, &y.dmin, y.scales, levels);
    uint8_t* q = y.qs;
    for (size_t j = 0; j < kQK_K; j += 64, q += 32) {
      for (size_t l = 0; l < 32; ++l) q[l] = uint8_t(levels[j + l] | (levels[j + l + 32] << 4));
    }
  }
}

void QuantizeQ5_KWeighted(const float* src, void* dst, size_t n, const float* importance) {
  BlockQ5_K* blocks = static_cast<BlockQ5_K*>(dst);
  uint8_t levels[kQK_K];
  for (size_t i = 0; i < n / kQK_K; ++i, src += kQK_K, importance += kQK_K) {
    BlockQ5_K& y = blocks[i];
    QuantizeK4ScalesWeighted(src, importance, 31, &y.d, &y.dmin, y.scales, levels);
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
