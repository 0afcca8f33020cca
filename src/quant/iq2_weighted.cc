// The IQ2 quantizers (IQ2_XXS, IQ2_XS, IQ2_S), as ggml's `quantize_row_iq2_*_impl` with an
// importance matrix: per group of 8 the magnitudes take a point of the format's grid (levels 1,
// 3, 5 times a sub-block scale) and the signs are stored apart; each sub-block's scale is found
// by trying a few around the one that maps its largest magnitude to level 5, then refined by
// least squares, and stored as 4 bits of a super-block scale.
#include "quant/iq2_weighted.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/formats.h"
#include "quant/iq2_search.h"
#include "quant/iq_weighted_common.h"

namespace petrel::quant {
namespace {

constexpr int kMaxQ = 3;  // levels 0..kMaxQ-1 = 0..2, standing for 1, 3, 5

// The grid level of magnitude `xval` at inverse scale `id`.
int LevelOf(float id, float xval) {
  return ClampInt(NearestInt(0.5f * (id * xval - 1)), 0, kMaxQ - 1);
}

// The grid index of levels known to be a grid point (0 should a non-finite input break that).
int GridIndex(const IQ2SearchTable& table, const int8_t* levels) {
  const int index = table.IndexOf(LevelsKey(levels));
  return index < 0 ? 0 : index;
}

// The sums of a weighted least-squares fit of `n` magnitudes by levels (values 2l + 1) times a
// scale: the scale is sumqx / sumq2, and the larger sumqx^2 / sumq2, the smaller the error.
struct FitSums {
  float sumqx = 0, sumq2 = 0;
};
FitSums Fit(int n, const float* xval, const float* weight, const int8_t* levels) {
  FitSums fit;
  for (int i = 0; i < n; ++i) {
    const float w = weight[i];
    const float q = 2 * levels[i] + 1;
    fit.sumqx += w * xval[i] * q;
    fit.sumq2 += w * q * q;
  }
  return fit;
}

// The least-squares scale of `n` magnitudes at `levels`; `scale` if it has none.
float FitScale(int n, const float* xval, const float* weight, const int8_t* levels, float scale) {
  const FitSums fit = Fit(n, xval, weight, levels);
  return fit.sumq2 > 0 ? fit.sumqx / fit.sumq2 : scale;
}

// IQ2_XXS and IQ2_XS keep 7 sign bits per 8 elements, the count of negatives being even: with an
// odd count, the element of least weighted magnitude keeps the wrong sign (its magnitude goes
// negative in `xval`). Writes the 8 magnitudes to `xval`, returns the 7 sign bits.
uint8_t EvenSigns(const float* xb, const float* weight, float* xval) {
  int n_negative = 0;
  uint8_t signs = 0;
  for (int i = 0; i < 8; ++i) {
    if (xb[i] >= 0) {
      xval[i] = xb[i];
    } else {
      xval[i] = -xb[i];
      ++n_negative;
      signs = uint8_t(signs | (1 << i));
    }
  }
  if (n_negative % 2) {
    int imin = 0;
    float min = weight[0] * xb[0] * xb[0];
    for (int i = 1; i < 8; ++i) {
      const float ax = weight[i] * xb[i] * xb[i];
      if (ax < min) {
        min = ax;
        imin = i;
      }
    }
    xval[imin] = -xval[imin];
    signs = uint8_t(signs ^ (1 << imin));
  }
  return signs & 127;
}

// The levels of `n_groups` groups of 8 at inverse scale `id`, each moved to its best grid
// neighbour (scored at `scale`) where it is off the grid; `on_grid` (optional) says which were
// on it already.
void GridLevels(const IQ2SearchTable& table, int n_groups, float id, float scale, const float* xval,
                const float* waux, int8_t* levels, bool* on_grid) {
  for (int k = 0; k < n_groups; ++k) {
    int8_t* group = levels + 8 * k;
    for (int i = 0; i < 8; ++i) group[i] = int8_t(LevelOf(id, xval[8 * k + i]));
    const IQ2Key key = LevelsKey(group);
    const bool found = table.IndexOf(key) >= 0;
    if (!found) IQ2BestNeighbour(table, key, xval + 8 * k, waux + 8 * k, scale, group);
    if (on_grid) on_grid[k] = found;
  }
}

// The scale search of IQ2_XS and IQ2_S over 16 magnitudes (two groups): 19 trial scales around
// max / 5, then the best one's off-grid groups re-rounded at its least-squares scale. Writes the
// levels (all on the grid) and returns the scale.
float SearchScale16(const IQ2SearchTable& table, const float* xval, const float* weight,
                    const float* waux, float max, int8_t* levels) {
  float best = 0;
  float scale = max / (2 * kMaxQ - 1);
  bool on_grid[2] = {true, true};
  int8_t trial[16];
  bool trial_on_grid[2];
  for (int is = -9; is <= 9; ++is) {
    const float id = (2 * kMaxQ - 1 + is * 0.1f) / max;
    const float this_scale = 1 / id;
    GridLevels(table, 2, id, this_scale, xval, waux, trial, trial_on_grid);
    const FitSums fit = Fit(16, xval, weight, trial);
    if (fit.sumq2 > 0 && fit.sumqx * fit.sumqx > best * fit.sumq2) {
      scale = fit.sumqx / fit.sumq2;
      best = scale * fit.sumqx;
      std::memcpy(levels, trial, 16);
      on_grid[0] = trial_on_grid[0];
      on_grid[1] = trial_on_grid[1];
    }
  }
  if ((!on_grid[0] || !on_grid[1]) && scale > 0) {
    const float id = 1 / scale;
    for (int k = 0; k < 2; ++k) {
      if (on_grid[k]) continue;
      GridLevels(table, 1, id, scale, xval + 8 * k, waux + 8 * k, levels + 8 * k, nullptr);
    }
    scale = FitScale(16, xval, weight, levels, scale);
  }
  return scale;
}

// The importance weights of a sub-block: importance * sqrt(sigma2 + x^2), and their roots.
void SubBlockWeights(int n, const float* xb, const float* importance, float sigma2, float* weight,
                     float* waux) {
  for (int i = 0; i < n; ++i) weight[i] = importance[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
  for (int i = 0; i < n; ++i) waux[i] = std::sqrt(weight[i]);
}

// The 4-bit code of sub-block scale `scale` against super-block scale 1 / `id`.
uint8_t ScaleCode(float id, float scale) {
  return uint8_t(ClampInt(NearestInt(0.5f * (id * scale - 1)), 0, 15));
}

}  // namespace

void QuantizeIQ2_XXSWeighted(const float* src, void* dst, size_t n, const float* importance) {
  const IQ2SearchTable& table = IQ2SearchTable::For(IQ2Codebook::kIQ2XXS);
  auto* blocks = static_cast<BlockIQ2_XXS*>(dst);
  for (size_t ibl = 0; ibl < n / kQK_K; ++ibl) {
    BlockIQ2_XXS& y = blocks[ibl];
    const float* xbl = src + kQK_K * ibl;
    // Per 32 elements: four grid indices, then four 7-bit sign groups and the 4-bit scale.
    uint32_t q2[kQK_K / 16] = {};
    float scales[kQK_K / 32];
    float max_scale = 0;
    y.d = F32ToF16(0.f);
    const float sigma2 = SuperBlockSumOfSquares(xbl) / kQK_K;
    for (size_t ib = 0; ib < kQK_K / 32; ++ib) {
      const float* xb = xbl + 32 * ib;
      float weight[32], waux[32], xval[32];
      int8_t levels[32], trial[32];
      uint8_t signs[4];
      SubBlockWeights(32, xb, importance + kQK_K * ibl + 32 * ib, sigma2, weight, waux);
      for (int k = 0; k < 4; ++k) signs[k] = EvenSigns(xb + 8 * k, weight + 8 * k, xval + 8 * k);
      float max = xval[0];
      for (int i = 1; i < 32; ++i) max = GgmlMax(max, xval[i]);
      if (max < kGroupMaxEps) {
        scales[ib] = 0;
        continue;
      }
      // The start: the best 4-level fit of the magnitudes, whose top level sets the trials.
      uint8_t fit_levels[32];
      float scale = MakeQpQuants(32, kMaxQ + 1, xval, fit_levels, weight);
      for (int i = 0; i < 32; ++i) levels[i] = int8_t(fit_levels[i]);
      const float eff_max = scale * kMaxQ;
      if (eff_max <= 0) {
        scales[ib] = 0;
        continue;
      }
      float best = 0;
      for (int is = -6; is <= 6; ++is) {
        const float id = (2 * kMaxQ - 1 + is * 0.1f) / eff_max;
        const float this_scale = 1 / id;
        GridLevels(table, 4, id, this_scale, xval, waux, trial, nullptr);
        const FitSums fit = Fit(32, xval, weight, trial);
        if (fit.sumq2 > 0 && fit.sumqx * fit.sumqx > best * fit.sumq2) {
          scale = fit.sumqx / fit.sumq2;
          best = scale * fit.sumqx;
          std::memcpy(levels, trial, 32);
        }
      }
      // Every group re-rounded at the best scale, then its least-squares scale.
      if (scale > 0) {
        GridLevels(table, 4, 1 / scale, scale, xval, waux, levels, nullptr);
        scale = FitScale(32, xval, weight, levels, scale);
      }
      if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 4; ++k) signs[k] = uint8_t(~signs[k] & 127);
      }
      for (int k = 0; k < 4; ++k) {
        q2[2 * ib + 0] |= uint32_t(GridIndex(table, levels + 8 * k)) << (8 * k);
        q2[2 * ib + 1] |= uint32_t(signs[k]) << (7 * k);
      }
      scales[ib] = scale;
      max_scale = GgmlMax(max_scale, scale);
    }
    if (!max_scale) {
      std::memset(y.qs, 0, sizeof(y.qs));
      continue;
    }
    const float d = max_scale / 31;
    y.d = F32ToF16(d);
    const float id = 1 / d;
    for (size_t ib = 0; ib < kQK_K / 32; ++ib) {
      q2[2 * ib + 1] |= uint32_t(ScaleCode(id, scales[ib])) << 28;
    }
    std::memcpy(y.qs, q2, sizeof(y.qs));
  }
}

void QuantizeIQ2_XSWeighted(const float* src, void* dst, size_t n, const float* importance) {
  const IQ2SearchTable& table = IQ2SearchTable::For(IQ2Codebook::kIQ2XS);
  auto* blocks = static_cast<BlockIQ2_XS*>(dst);
  for (size_t ibl = 0; ibl < n / kQK_K; ++ibl) {
    BlockIQ2_XS& y = blocks[ibl];
    const float* xbl = src + kQK_K * ibl;
    uint16_t q2[kQK_K / 8] = {};  // per 8 elements: 9-bit grid index, 7 sign bits
    float scales[kQK_K / 16];
    float max_scale = 0;
    y.d = F32ToF16(0.f);
    std::memset(y.scales, 0, sizeof(y.scales));
    const float sigma2 = SuperBlockSumOfSquares(xbl) / kQK_K;
    for (size_t ib = 0; ib < kQK_K / 16; ++ib) {
      const float* xb = xbl + 16 * ib;
      float weight[16], waux[16], xval[16];
      int8_t levels[16] = {};
      uint8_t signs[2];
      SubBlockWeights(16, xb, importance + kQK_K * ibl + 16 * ib, sigma2, weight, waux);
      for (int k = 0; k < 2; ++k) signs[k] = EvenSigns(xb + 8 * k, weight + 8 * k, xval + 8 * k);
      float max = xval[0];
      for (int i = 1; i < 16; ++i) max = GgmlMax(max, xval[i]);
      if (max < kGroupMaxEps) {
        scales[ib] = 0;
        continue;
      }
      float scale = SearchScale16(table, xval, weight, waux, max, levels);
      if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 2; ++k) signs[k] = uint8_t(~signs[k] & 127);
      }
      for (int k = 0; k < 2; ++k) {
        q2[2 * ib + k] = uint16_t(GridIndex(table, levels + 8 * k) | (signs[k] << 9));
      }
      scales[ib] = scale;
      max_scale = GgmlMax(max_scale, scale);
    }
    if (!max_scale) {
      std::memset(y.qs, 0, sizeof(y.qs));
      continue;
    }
    const float d = max_scale / 31;
    y.d = F32ToF16(d);
    const float id = 1 / d;
    for (size_t ib = 0; ib < kQK_K / 16; ib += 2) {
      y.scales[ib / 2] = uint8_t(ScaleCode(id, scales[ib]) | (ScaleCode(id, scales[ib + 1]) << 4));
    }
    std::memcpy(y.qs, q2, sizeof(y.qs));
  }
}

void QuantizeIQ2_SWeighted(const float* src, void* dst, size_t n, const float* importance) {
  // Sub-blocks whose largest magnitude is below this are stored as zero (GROUP_MAX_EPS_IQ2_S).
  constexpr float kIQ2SGroupMaxEps = 1e-8f;
  const IQ2SearchTable& table = IQ2SearchTable::For(IQ2Codebook::kIQ2S);
  auto* blocks = static_cast<BlockIQ2_S*>(dst);
  for (size_t ibl = 0; ibl < n / kQK_K; ++ibl) {
    BlockIQ2_S& y = blocks[ibl];
    const float* xbl = src + kQK_K * ibl;
    float scales[kQK_K / 16];
    float max_scale = 0;
    std::memset(&y, 0, sizeof(y));
    y.d = F32ToF16(0.f);
    const float sigma2 = 2 * SuperBlockSumOfSquares(xbl) / kQK_K;
    for (size_t ib = 0; ib < kQK_K / 16; ++ib) {
      const float* xb = xbl + 16 * ib;
      float weight[16], waux[16], xval[16];
      int8_t levels[16] = {};
      uint8_t signs[2] = {};  // all 8 sign bits: IQ2_S has no parity rule
      SubBlockWeights(16, xb, importance + kQK_K * ibl + 16 * ib, sigma2, weight, waux);
      for (int i = 0; i < 16; ++i) {
        if (xb[i] >= 0) {
          xval[i] = xb[i];
        } else {
          xval[i] = -xb[i];
          signs[i / 8] = uint8_t(signs[i / 8] | (1 << (i % 8)));
        }
      }
      float max = xval[0];
      for (int i = 1; i < 16; ++i) max = GgmlMax(max, xval[i]);
      if (max < kIQ2SGroupMaxEps) {
        scales[ib] = 0;
        continue;
      }
      float scale = SearchScale16(table, xval, weight, waux, max, levels);
      if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 2; ++k) signs[k] = uint8_t(~signs[k]);
      }
      for (int k = 0; k < 2; ++k) {
        const int index = GridIndex(table, levels + 8 * k);
        const size_t i8 = 2 * ib + size_t(k);
        y.qs[i8] = uint8_t(index & 255);
        y.qh[i8 / 4] = uint8_t(y.qh[i8 / 4] | ((index >> 8) << (2 * (i8 % 4))));
        y.qs[kQK_K / 8 + i8] = signs[k];
      }
      scales[ib] = scale;
      max_scale = GgmlMax(max_scale, scale);
    }
    if (!max_scale) continue;
    const float d = max_scale / 31;
    y.d = F32ToF16(d * 0.9875f);
    const float id = 1 / d;
    for (size_t ib = 0; ib < kQK_K / 16; ib += 2) {
      y.scales[ib / 2] = uint8_t(ScaleCode(id, scales[ib]) | (ScaleCode(id, scales[ib + 1]) << 4));
    }
  }
}

}  // namespace petrel::quant
