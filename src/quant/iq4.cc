// IQ4_NL (32-blocks) and IQ4_XS (256-blocks with 6-bit sub-block scales): 4-bit indices into the
// non-linear grid kIQ4NLValues, which spends more levels near zero where weights cluster.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/formats.h"

namespace petrel::quant {
namespace {

// Index of the grid value nearest to `x` (ggml's `best_index_int8`; ties go up).
int BestIndex(float x) {
  const int8_t* values = kIQ4NLValues;
  if (x <= values[0]) return 0;
  if (x >= values[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < values[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return x - values[hi - 1] < values[hi] - x ? hi - 1 : hi;
}

// ggml's `quantize_row_iq4_nl_impl`, ntry = 7: per 32-block a scale search weighted by x^2 (or,
// with `importance`, by importance * sqrt(2 mean(x^2) + x^2) over the super-block), then
// (IQ4_XS) 6-bit scales relative to a super-block scale. `scales_h`/`scales_l` are null for
// IQ4_NL (one block per super-block).
void QuantizeIQ4Impl(size_t super_block, const float* x, uint16_t* dh, uint8_t* q4,
                     uint16_t* scales_h, uint8_t* scales_l, const float* importance) {
  constexpr int kTries = 7;
  const int8_t* values = kIQ4NLValues;
  uint8_t levels[kQK_K];
  float scales[kQK_K / kQK], weight[kQK];
  std::memset(q4, 0, super_block / 2);
  *dh = F32ToF16(0.f);
  float max_scale = 0, amax_scale = 0;
  const size_t n_blocks = super_block / kQK;
  float sigma2 = 0;
  if (importance) {
    for (size_t j = 0; j < super_block; ++j) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / float(super_block);
  }
  for (size_t ib = 0; ib < n_blocks; ++ib) {
    const float* xb = x + ib * kQK;
    uint8_t* lb = levels + ib * kQK;
    if (importance) {
      const float* qw = importance + ib * kQK;
      for (size_t j = 0; j < kQK; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
    } else {
      for (size_t j = 0; j < kQK; ++j) weight[j] = xb[j] * xb[j];
    }
    float amax = 0, max = 0;
    for (size_t j = 0; j < kQK; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (size_t j = 0; j < kQK; ++j) {
      const int l = BestIndex(id * xb[j]);
      lb[j] = uint8_t(l);
      const float q = values[l], w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int itry = -kTries; itry <= kTries; ++itry) {
      id = (itry + values[0]) / max;
      sumqx = sumq2 = 0;
      for (size_t j = 0; j < kQK; ++j) {
        const int l = BestIndex(id * xb[j]);
        const float q = values[l], w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) {
      amax_scale = std::fabs(d);
      max_scale = d;
    }
  }
  if (n_blocks > 1) {
    *scales_h = 0;
    const float d = -max_scale / 32;
    *dh = F32ToF16(d);
    const float id = d ? 1 / d : 0.f;
    for (size_t ib = 0; ib < n_blocks; ++ib) {
      int l = NearestInt(id * scales[ib]);
      l = std::max(-32, std::min(31, l));
      const float dl = d * float(l);
      const float idl = dl ? 1 / dl : 0.f;
      uint8_t* lb = levels + ib * kQK;
      const float* xb = x + ib * kQK;
      for (size_t j = 0; j < kQK; ++j) lb[j] = uint8_t(BestIndex(idl * xb[j]));
      l += 32;
      const uint8_t l_low = l & 0xF, l_high = uint8_t(l >> 4);
      if (ib % 2 == 0) {
        scales_l[ib / 2] = l_low;
      } else {
        scales_l[ib / 2] |= uint8_t(l_low << 4);
      }
      *scales_h |= uint16_t(l_high << (2 * ib));
    }
  } else {
    *dh = F32ToF16(scales[0]);
    const float id = scales[0] ? 1 / scales[0] : 0;
    for (size_t j = 0; j < super_block; ++j) levels[j] = uint8_t(BestIndex(id * x[j]));
  }
  for (size_t i = 0; i < super_block / kQK; ++i) {
    for (size_t j = 0; j < 16; ++j) {
      q4[16 * i + j] = uint8_t(levels[32 * i + j] | (levels[32 * i + 16 + j] << 4));
    }
  }
}

}  // namespace

void DequantizeIQ4_NL(const void* src, float* dst, size_t n) {
  const BlockIQ4_NL* blocks = static_cast<const BlockIQ4_NL*>(src);
  for (size_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = F16ToF32(blocks[i].d);
    for (size_t j = 0; j < kQK / 2; ++j) {
      dst[j] = d * float(kIQ4NLValues[blocks[i].qs[j] & 0xF]);
      dst[j + 16] = d * float(kIQ4NLValues[blocks[i].qs[j] >> 4]);
    }
  }
}

void QuantizeIQ4_NL(const float* src, void* dst, size_t n) {
  QuantizeIQ4_NLWeighted(src, dst, n, nullptr);
}

void QuantizeIQ4_NLWeighted(const float* src, void* dst, size_t n, const float* importance) {
  BlockIQ4_NL* blocks = static_cast<BlockIQ4_NL*>(dst);
  for (size_t i = 0; i < n / kQK; ++i, src += kQK) {
    QuantizeIQ4Impl(kQK, src, &blocks[i].d, blocks[i].qs, nullptr, nullptr,
                    importance ? importance + i * kQK : nullptr);
  }
}

void DequantizeIQ4_XS(const void* src, float* dst, size_t n) {
  const BlockIQ4_XS* blocks = static_cast<const BlockIQ4_XS*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(blocks[i].d);
    const uint8_t* qs = blocks[i].qs;
    for (size_t ib = 0; ib < kQK_K / kQK; ++ib, dst += kQK, qs += 16) {
      const float dl = d * float(IQ4XSScale(blocks[i], ib));
      for (size_t j = 0; j < 16; ++j) {
        dst[j] = dl * float(kIQ4NLValues[qs[j] & 0xF]);
        dst[j + 16] = dl * float(kIQ4NLValues[qs[j] >> 4]);
      }
    }
  }
}

void QuantizeIQ4_XS(const float* src, void* dst, size_t n) {
  QuantizeIQ4_XSWeighted(src, dst, n, nullptr);
}

void QuantizeIQ4_XSWeighted(const float* src, void* dst, size_t n, const float* importance) {
  BlockIQ4_XS* blocks = static_cast<BlockIQ4_XS*>(dst);
  for (size_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    QuantizeIQ4Impl(kQK_K, src, &blocks[i].d, blocks[i].qs, &blocks[i].scales_h,
                    blocks[i].scales_l, importance ? importance + i * kQK_K : nullptr);
  }
}

}  // namespace petrel::quant
