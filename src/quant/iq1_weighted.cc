// The IQ1 quantizers (IQ1_S, IQ1_M), as ggml's `quantize_row_iq1_*_impl` with an importance
// matrix: each element takes a level -1, 0 or +1, shifted by a delta of +-1/8 per group, times
// a sub-block scale. With three levels the best split of a sub-block's sorted values into them
// is found exhaustively; groups of 8 whose levels are not a point of the 2048-point grid move to
// their best grid neighbour. Scales are 3 bits against a super-block scale.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/formats.h"
#include "quant/iq2_search.h"
#include "quant/iq2_weighted.h"
#include "quant/iq_grids.h"
#include "quant/iq_weighted_common.h"

namespace petrel::quant {
namespace {

// The three levels with the delta added (`kShiftUp`) or subtracted (`kShiftDown`).
constexpr float kShiftUp[3] = {-1 + kIQ1Delta, kIQ1Delta, 1 + kIQ1Delta};
constexpr float kShiftDown[3] = {-1 - kIQ1Delta, -kIQ1Delta, 1 - kIQ1Delta};

// The element indices of `xb` (n) in ascending order of value, equal values in index order.
template <int n>
void SortedOrder(const float* xb, int* order) {
  for (int j = 0; j < n; ++j) order[j] = j;
  std::stable_sort(order, order + n, [xb](int a, int b) { return xb[a] < xb[b]; });
}

// Levels 0, 1, 2 to the sorted elements [0, i1), [i1, i2), [i2, n).
void SplitLevels(int n, const int* order, int i1, int i2, int8_t* levels) {
  for (int j = 0; j < n; ++j) levels[order[j]] = int8_t(j < i1 ? 0 : j < i2 ? 1 : 2);
}

// The grid index of a group's levels, moving them to the best neighbour where off the grid.
int GroupIndex(const IQ2SearchTable& table, const float* xb, const float* weight, float scale,
               const float* level_values, int8_t* levels, bool* all_on_grid) {
  const IQ2Key key = LevelsKey(levels);
  const int index = table.IndexOf(key);
  if (index >= 0) return index;
  *all_on_grid = false;
  return IQ1BestNeighbour(table, key, xb, weight, scale, level_values, levels);
}

}  // namespace

void QuantizeIQ1_SWeighted(const float* src, void* dst, size_t n, const float* importance) {
  constexpr int kBlock = 32;                  // elements per sub-block (one scale and delta)
  constexpr float kIQ1SGroupMaxEps = 1e-12f;  // GROUP_MAX_EPS_IQ1_S
  const IQ2SearchTable& table = IQ2SearchTable::For(IQ2Codebook::kIQ1S);
  auto* blocks = static_cast<BlockIQ1_S*>(dst);
  for (size_t ibl = 0; ibl < n / kQK_K; ++ibl) {
    BlockIQ1_S& y = blocks[ibl];
    const float* xbl = src + kQK_K * ibl;
    float scales[kQK_K / kBlock];
    int8_t shifts[kQK_K / kBlock];
    float max_scale = 0;
    y.d = F32ToF16(0.f);
    std::memset(y.qs, 0, sizeof(y.qs));
    std::memset(y.qh, 0, sizeof(y.qh));
    const float sigma2 = 2 * SuperBlockSumOfSquares(xbl) / kQK_K;
    for (size_t ib = 0; ib < kQK_K / kBlock; ++ib) {
      const float* xb = xbl + kBlock * ib;
      const float* qw = importance + kQK_K * ibl + kBlock * ib;
      float weight[kBlock];
      for (int i = 0; i < kBlock; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
      float max = std::fabs(xb[0]);
      for (int i = 1; i < kBlock; ++i) max = GgmlMax(max, std::fabs(xb[i]));
      if (max < kIQ1SGroupMaxEps) {
        scales[ib] = 0;
        shifts[ib] = 1;
        continue;
      }
      // Prefix sums over the sorted values make each split's least-squares fit O(1).
      int order[kBlock];
      SortedOrder<kBlock>(xb, order);
      float sumx[kBlock + 1], sumw[kBlock + 1];
      sumx[0] = sumw[0] = 0;
      for (int j = 0; j < kBlock; ++j) {
        const int i = order[j];
        sumx[j + 1] = sumx[j] + weight[i] * xb[i];
        sumw[j + 1] = sumw[j] + weight[i];
      }
      float best_score = -FLT_MAX, scale = max;
      int besti1 = -1, besti2 = -1, best_shift = 0;
      for (int i1 = 0; i1 <= kBlock; ++i1) {
        for (int i2 = i1; i2 <= kBlock; ++i2) {
          for (const int shift : {1, -1}) {
            const float* xs = shift == 1 ? kShiftUp : kShiftDown;
            const float sumqx = (sumx[i1] - sumx[0]) * xs[0] + (sumx[i2] - sumx[i1]) * xs[1] +
                                (sumx[kBlock] - sumx[i2]) * xs[2];
            const float sumq2 = (sumw[i1] - sumw[0]) * xs[0] * xs[0] +
                                (sumw[i2] - sumw[i1]) * xs[1] * xs[1] +
                                (sumw[kBlock] - sumw[i2]) * xs[2] * xs[2];
            if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
              scale = sumqx / sumq2;
              best_score = scale * sumqx;
              besti1 = i1;
              besti2 = i2;
              best_shift = shift;
            }
          }
        }
      }
      if (besti1 < 0 || besti2 < 0 || best_shift == 0) {
        scales[ib] = 0;
        shifts[ib] = 1;
        continue;
      }
      int8_t levels[kBlock];
      SplitLevels(kBlock, order, besti1, besti2, levels);
      if (scale < 0) {
        for (int j = 0; j < kBlock; ++j) levels[j] = int8_t(2 - levels[j]);
        scale = -scale;
        best_shift = -best_shift;
      }
      const float* xs = best_shift == 1 ? kShiftUp : kShiftDown;
      bool all_on_grid = true;
      uint16_t index[kBlock / 8];
      for (int k = 0; k < kBlock / 8; ++k) {
        index[k] = uint16_t(
            GroupIndex(table, xb + 8 * k, weight + 8 * k, scale, xs, levels + 8 * k, &all_on_grid));
      }
      if (!all_on_grid) {
        float sumqx = 0, sumq2 = 0;
        for (int k = 0; k < kBlock / 8; ++k) {
          const int8_t* point = table.Point(index[k]);
          for (int j = 0; j < 8; ++j) {
            const float w = weight[8 * k + j];
            const float q = xs[(point[j] - 1) / 2];
            sumqx += w * q * xb[8 * k + j];
            sumq2 += w * q * q;
          }
        }
        if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
      }
      uint16_t high = 0;
      for (int k = 0; k < kBlock / 8; ++k) {
        y.qs[(kBlock / 8) * ib + size_t(k)] = uint8_t(index[k] & 255);
        high = uint16_t(high | ((index[k] >> 8) << (3 * k)));
      }
      y.qh[ib] = high;
      scales[ib] = scale;
      shifts[ib] = int8_t(best_shift);
      max_scale = GgmlMax(max_scale, scale);
    }
    if (!max_scale) continue;
    const float d = max_scale / 15;
    y.d = F32ToF16(d * 1.125f);
    const float id = 1 / d;
    for (size_t ib = 0; ib < kQK_K / kBlock; ++ib) {
      int code = ClampInt(NearestInt(0.5f * (id * scales[ib] - 1)), 0, 7);
      if (shifts[ib] == -1) code |= 8;
      y.qh[ib] = uint16_t(y.qh[ib] | (code << 12));
    }
  }
}

void QuantizeIQ1_MWeighted(const float* src, void* dst, size_t n, const float* importance) {
  constexpr int kBlock = 16;                 // elements per sub-block (one scale)
  constexpr float kIQ1MGroupMaxEps = 1e-7f;  // GROUP_MAX_EPS_IQ1_M
  // The delta sign bits of qh per shift code: bit 0 of the code is the second group's delta
  // (down if set), bit 1 the first group's.
  constexpr uint8_t kShiftMasks[4] = {0x00, 0x80, 0x08, 0x88};
  const IQ2SearchTable& table = IQ2SearchTable::For(IQ2Codebook::kIQ1S);
  // The levels of group k (0, 1) of a sub-block with shift code `code` (0..3).
  const auto group_levels = [](int code, int k) {
    return (k == 0 ? code < 2 : code % 2 == 0) ? kShiftUp : kShiftDown;
  };
  auto* blocks = static_cast<BlockIQ1_M*>(dst);
  for (size_t ibl = 0; ibl < n / kQK_K; ++ibl) {
    BlockIQ1_M& y = blocks[ibl];
    const float* xbl = src + kQK_K * ibl;
    float scales[kQK_K / kBlock];
    int8_t shifts[kQK_K / kBlock];
    float max_scale = 0;
    std::memset(&y, 0, sizeof(y));
    const float sigma2 = 2 * SuperBlockSumOfSquares(xbl) / kQK_K;
    float weight[kBlock];
    const auto sub_block_weights = [&](const float* xb, size_t ib) {
      const float* qw = importance + kQK_K * ibl + kBlock * ib;
      for (int i = 0; i < kBlock; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    };
    for (size_t ib = 0; ib < kQK_K / kBlock; ++ib) {
      const float* xb = xbl + kBlock * ib;
      sub_block_weights(xb, ib);
      float max = std::fabs(xb[0]);
      for (int i = 1; i < kBlock; ++i) max = GgmlMax(max, std::fabs(xb[i]));
      if (max < kIQ1MGroupMaxEps) {
        scales[ib] = 0;
        shifts[ib] = 0;
        continue;
      }
      int order[kBlock];
      SortedOrder<kBlock>(xb, order);
      // Each split under the four shift codes: (first group, second group) = 0: up, up;
      // 1: up, down; 2: down, up; 3: down, down. A split's sums add, in sorted order, level 0
      // terms over [0, i1), level 1 over [i1, i2), level 2 over [i2, n), each from zero, as
      // ggml's do (float addition is not associative, so the order is kept); the sums over
      // [0, i1) and then [i1, i2) are shared by the splits that extend them.
      struct Sums {
        float qx[4] = {}, q2[4] = {};
      };
      Sums terms[kBlock][3];  // (sorted position, level): the contribution under each code
      for (int j = 0; j < kBlock; ++j) {
        const int i = order[j];
        // The first group's elements take code bit 1, the second group's code bit 0.
        const bool first = i < kBlock / 2;
        for (int level = 0; level < 3; ++level) {
          for (int code = 0; code < 4; ++code) {
            const bool shifted_down = first ? code >= 2 : code % 2 == 1;
            const float xs = shifted_down ? kShiftDown[level] : kShiftUp[level];
            terms[j][level].qx[code] = weight[i] * xs * xb[i];
            terms[j][level].q2[code] = weight[i] * xs * xs;
          }
        }
      }
      const auto add = [](Sums& sums, const Sums& term) {
        for (int code = 0; code < 4; ++code) {
          sums.qx[code] += term.qx[code];
          sums.q2[code] += term.q2[code];
        }
      };
      float best_score = -FLT_MAX, scale = max;
      int besti1 = -1, besti2 = -1, best_code = -1;
      Sums low;  // level 0 over [0, i1)
      for (int i1 = 0; i1 <= kBlock; ++i1) {
        Sums low_mid = low;  // and level 1 over [i1, i2)
        for (int i2 = i1; i2 <= kBlock; ++i2) {
          Sums sums = low_mid;
          for (int j = i2; j < kBlock; ++j) add(sums, terms[j][2]);
          for (int code = 0; code < 4; ++code) {
            const float sumqx = sums.qx[code], sumq2 = sums.q2[code];
            if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
              scale = sumqx / sumq2;
              best_score = scale * sumqx;
              besti1 = i1;
              besti2 = i2;
              best_code = code;
            }
          }
          if (i2 < kBlock) add(low_mid, terms[i2][1]);
        }
        if (i1 < kBlock) add(low, terms[i1][0]);
      }
      if (besti1 < 0 || besti2 < 0 || best_code < 0) {
        scales[ib] = 0;
        shifts[ib] = 0;
        continue;
      }
      int8_t levels[kBlock];
      SplitLevels(kBlock, order, besti1, besti2, levels);
      if (scale < 0) {
        for (int j = 0; j < kBlock; ++j) levels[j] = int8_t(2 - levels[j]);
        scale = -scale;
        best_code = 3 - best_code;
      }
      bool all_on_grid = true;
      uint16_t index[2];
      for (int k = 0; k < 2; ++k) {
        index[k] = uint16_t(GroupIndex(table, xb + 8 * k, weight + 8 * k, scale,
                                       group_levels(best_code, k), levels + 8 * k, &all_on_grid));
      }
      if (!all_on_grid) {
        float sumqx = 0, sumq2 = 0;
        for (int k = 0; k < 2; ++k) {
          const float* xs = group_levels(best_code, k);
          const int8_t* point = table.Point(index[k]);
          for (int j = 0; j < 8; ++j) {
            const float w = weight[8 * k + j];
            const float q = xs[(point[j] - 1) / 2];
            sumqx += w * q * xb[8 * k + j];
            sumq2 += w * q * q;
          }
        }
        if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
      }
      y.qs[2 * ib + 0] = uint8_t(index[0] & 255);
      y.qs[2 * ib + 1] = uint8_t(index[1] & 255);
      y.qh[ib] = uint8_t((index[0] >> 8) | ((index[1] >> 8) << 4));
      scales[ib] = scale;
      shifts[ib] = int8_t(best_code);
      max_scale = GgmlMax(max_scale, scale);
    }
    if (!max_scale) continue;

    // The 3-bit scales, then the super-block scale refitted to the stored codes.
    uint16_t sc[4] = {};
    float d = max_scale / 15;
    const float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (size_t ib = 0; ib < kQK_K / kBlock; ++ib) {
      const int code = ClampInt(NearestInt(0.5f * (id * scales[ib] - 1)), 0, 7);
      sc[ib / 4] = uint16_t(sc[ib / 4] | (code << (3 * (ib % 4))));
      y.qh[ib] = uint8_t(y.qh[ib] | kShiftMasks[shifts[ib]]);
      const float* xb = xbl + kBlock * ib;
      sub_block_weights(xb, ib);
      for (int k = 0; k < 2; ++k) {
        const float* xs = group_levels(shifts[ib], k);
        const int grid_index = y.qs[2 * ib + size_t(k)] | ((y.qh[ib] << (8 - 4 * k)) & 0x700);
        const int8_t* point = table.Point(grid_index);
        for (int j = 0; j < 8; ++j) {
          const float w = weight[8 * k + j];
          const float q = xs[(point[j] - 1) / 2] * (2 * code + 1);
          sumqx += w * q * xb[8 * k + j];
          sumq2 += w * q * q;
        }
      }
    }
    if (sumq2 > 0) d = sumqx / sumq2;
    const uint16_t d16 = F32ToF16(d * 1.1125f);
    sc[0] = uint16_t(sc[0] | ((d16 & 0x000f) << 12));
    sc[1] = uint16_t(sc[1] | ((d16 & 0x00f0) << 8));
    sc[2] = uint16_t(sc[2] | ((d16 & 0x0f00) << 4));
    sc[3] = uint16_t(sc[3] | (d16 & 0xf000));
    std::memcpy(y.scales, sc, sizeof(y.scales));
  }
}

}  // namespace petrel::quant
