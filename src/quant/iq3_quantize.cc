// IQ3_XXS and IQ3_S encoding: per 32 elements, signs apart, a search over scales for the
// codebook points (4 elements each, iq3_search.h) that best fit the magnitudes, weighted by
// the importance matrix (or by x^2 without one); then 4-bit group scales relative to one f16
// super-block scale. Byte for byte what ggml's `quantize_iq3_xxs` / `quantize_iq3_s` write.
#include "quant/iq3_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/formats.h"  // NearestInt
#include "quant/iq3_search.h"

namespace petrel::quant {
namespace {

constexpr int kGroupElems = 32;               // elements per group scale
constexpr int kGroupCodes = kGroupElems / 4;  // codebook points per group
constexpr int kMaxLevel = 7;                  // levels l = 0..7 stand for 2l + 1

// Where the IQ3_XXS and IQ3_S searches differ (both are ggml's, kept as they are for exact
// output).
struct GroupSearch {
  int n_steps;  // scales tried: (15 + 0.2 step) / max for step in [-n_steps, n_steps]
  // Whether a group counts as on the codebook before any trial scale improves the fit
  // (IQ3_XXS) or not (IQ3_S, which then refits every group at the starting scale).
  bool start_on_grid;
  // Whether the final refit recomputes every group (IQ3_S) or only those that had to take a
  // neighbour (IQ3_XXS).
  bool refit_all;
};
constexpr GroupSearch kIQ3XXSSearch = {15, true, false};
constexpr GroupSearch kIQ3SSearch = {9, false, true};

// The code of the levels nearest to `xval` (4 elements) at inverse scale `inverse_scale`.
int CodeAt(const float* xval, float inverse_scale, int8_t* levels) {
  int code = 0;
  for (int i = 0; i < 4; ++i) {
    const int level = NearestInt(0.5f * (inverse_scale * xval[i] - 1));
    levels[i] = int8_t(std::max(0, std::min(kMaxLevel, level)));
    code |= levels[i] << (3 * i);
  }
  return code;
}

// Σ w x q and Σ w q² over the group, q = 2l + 1.
void FitSums(const float* weight, const float* xval, const int8_t* levels, float* sum_qx,
             float* sum_q2) {
  float qx = 0, q2 = 0;
  for (int i = 0; i < kGroupElems; ++i) {
    const float w = weight[i];
    const float q = float(2 * levels[i] + 1);
    qx += w * xval[i] * q;
    q2 += w * q * q;
  }
  *sum_qx = qx;
  *sum_q2 = q2;
}

// The scale of one group of magnitudes `xval` whose largest is `max` (> 0), and its levels
// (`levels`, 32), every 4 of them a codebook point. `weight` weighs the fit, `weight_root`
// (its square root) the choice among neighbours.
float SearchGroup(const IQ3SearchTables& tables, const GroupSearch& search, const float* xval,
                  const float* weight, const float* weight_root, float max, int8_t* levels) {
  std::memset(levels, 0, kGroupElems);
  int8_t trial[kGroupElems];
  bool on_grid[kGroupCodes], trial_on_grid[kGroupCodes];
  std::fill(on_grid, on_grid + kGroupCodes, search.start_on_grid);
  float best = 0;
  float scale = max / (2 * kMaxLevel + 1);
  for (int step = -search.n_steps; step <= search.n_steps; ++step) {
    const float inverse = (float(2 * kMaxLevel + 1) + float(step) * 0.2f) / max;
    const float trial_scale = 1 / inverse;
    for (int k = 0; k < kGroupCodes; ++k) {
      const int code = CodeAt(xval + 4 * k, inverse, trial + 4 * k);
      trial_on_grid[k] = tables.index_of_code[size_t(code)] >= 0;
      if (!trial_on_grid[k]) {
        IQ3BestNeighbour(tables, code, xval + 4 * k, weight_root + 4 * k, trial_scale,
                         trial + 4 * k);
      }
    }
    float sum_qx, sum_q2;
    FitSums(weight, xval, trial, &sum_qx, &sum_q2);
    if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
      scale = sum_qx / sum_q2;
      best = scale * sum_qx;
      std::memcpy(levels, trial, kGroupElems);
      std::copy(trial_on_grid, trial_on_grid + kGroupCodes, on_grid);
    }
  }
  const bool all_on_grid = std::all_of(on_grid, on_grid + kGroupCodes, [](bool b) { return b; });
  if (!all_on_grid && scale > 0) {
    const float inverse = 1 / scale;
    for (int k = 0; k < kGroupCodes; ++k) {
      if (on_grid[k] && !search.refit_all) continue;
      int8_t nearest[4];
      const int code = CodeAt(xval + 4 * k, inverse, nearest);
      int index = tables.index_of_code[size_t(code)];
      if (index < 0) {
        index = IQ3BestNeighbour(tables, code, xval + 4 * k, weight_root + 4 * k, scale,
                                 levels + 4 * k);
      }
      const int8_t* point = tables.Levels(index);
      for (int i = 0; i < 4; ++i) levels[4 * k + i] = int8_t((point[i] - 1) / 2);
    }
    float sum_qx, sum_q2;
    FitSums(weight, xval, levels, &sum_qx, &sum_q2);
    if (sum_q2 > 0) scale = sum_qx / sum_q2;
  }
  return scale;
}

// The codebook index of the 4 levels at `levels` (always a codebook point after the search).
int IndexOf(const IQ3SearchTables& tables, const int8_t* levels) {
  int code = 0;
  for (int i = 0; i < 4; ++i) code |= levels[i] << (3 * i);
  const int index = tables.index_of_code[size_t(code)];
  IQ3Check(index >= 0, "IQ3 levels off the codebook after the search");
  return index;
}

// The fit weights of one group: importance * sqrt(sigma2 + x^2), or x^2 without importance.
void GroupWeights(const float* xb, const float* importance, float sigma2, float* weight,
                  float* weight_root) {
  for (int i = 0; i < kGroupElems; ++i) {
    weight[i] = importance ? importance[i] * std::sqrt(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
  }
  for (int i = 0; i < kGroupElems; ++i) weight_root[i] = std::sqrt(weight[i]);
}

// 2 Σ x² / 256 over one super-block: the weighting's floor.
float SuperBlockSigma2(const float* x) {
  float sum_x2 = 0;
  for (size_t i = 0; i < kQK_K; ++i) sum_x2 += x[i] * x[i];
  return 2 * sum_x2 / float(kQK_K);
}

// The 4-bit group scale index for `scale` against super-block step `d` (inverse `inverse_d`):
// the decoder multiplies by d (2s + 1).
uint32_t GroupScaleIndex(float scale, float inverse_d) {
  const int index = NearestInt(0.5f * (inverse_d * scale - 1));
  return uint32_t(std::max(0, std::min(15, index)));
}

void QuantizeIQ3_XXSBlock(const float* x, const float* importance, BlockIQ3_XXS* block) {
  constexpr size_t kGroups = kQK_K / kGroupElems;
  const IQ3SearchTables& tables = IQ3XXSSearchTables();
  uint8_t indices[kQK_K / 4] = {};
  uint32_t sign_words[kGroups] = {};  // 4 × 7 sign bits, scale index in bits 28..31
  float scales[kGroups];
  float weight[kGroupElems], weight_root[kGroupElems], xval[kGroupElems];
  int8_t levels[kGroupElems];
  block->d = F32ToF16(0.f);
  float max_scale = 0;
  const float sigma2 = SuperBlockSigma2(x);
  for (size_t ib = 0; ib < kGroups; ++ib) {
    const float* xb = x + kGroupElems * ib;
    GroupWeights(xb, importance ? importance + kGroupElems * ib : nullptr, sigma2, weight,
                 weight_root);
    // Seven sign bits per 8 elements: with an odd count of negatives, the element that costs
    // least (smallest w x²) keeps a wrong sign so that the eighth bit is the parity.
    uint8_t signs[4];
    for (int k = 0; k < 4; ++k) {
      int n_negative = 0;
      uint8_t bits = 0;
      for (int i = 0; i < 8; ++i) {
        const float value = xb[8 * k + i];
        xval[8 * k + i] = value >= 0 ? value : -value;
        if (!(value >= 0)) {
          ++n_negative;
          bits |= uint8_t(1 << i);
        }
      }
      if (n_negative % 2) {
        int cheapest = 0;
        float cheapest_cost = weight[8 * k] * xb[8 * k] * xb[8 * k];
        for (int i = 1; i < 8; ++i) {
          const float cost = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
          if (cost < cheapest_cost) {
            cheapest_cost = cost;
            cheapest = i;
          }
        }
        xval[8 * k + cheapest] = -xval[8 * k + cheapest];
        bits ^= uint8_t(1 << cheapest);
      }
      signs[k] = bits & 127;
    }
    const float max = *std::max_element(xval, xval + kGroupElems);
    if (max < 1e-8f) {  // ggml's GROUP_MAX_EPS_IQ3_XXS: the group stays all zero
      scales[ib] = 0;
      continue;
    }
    float scale = SearchGroup(tables, kIQ3XXSSearch, xval, weight, weight_root, max, levels);
    if (scale < 0) {
      scale = -scale;
      for (uint8_t& bits : signs) bits = ~bits & 127;
    }
    for (int k = 0; k < kGroupCodes; ++k) {
      indices[kGroupCodes * ib + k] = uint8_t(IndexOf(tables, levels + 4 * k));
    }
    sign_words[ib] = uint32_t(signs[0]) | uint32_t(signs[1]) << 7 | uint32_t(signs[2]) << 14 |
                     uint32_t(signs[3]) << 21;
    scales[ib] = scale;
    max_scale = std::max(max_scale, scale);
  }
  if (max_scale == 0) {
    std::memset(block->qs, 0, sizeof(block->qs));
    return;
  }
  const float d = max_scale / 31;
  block->d = F32ToF16(d * 1.0125f);  // ggml's fudge factor
  const float inverse_d = 1 / d;
  for (size_t ib = 0; ib < kGroups; ++ib)
    sign_words[ib] |= GroupScaleIndex(scales[ib], inverse_d) << 28;
  std::memcpy(block->qs, indices, sizeof(indices));
  for (size_t ib = 0; ib < kGroups; ++ib) {
    for (int byte = 0; byte < 4; ++byte) {
      block->qs[sizeof(indices) + 4 * ib + byte] = uint8_t(sign_words[ib] >> (8 * byte));
    }
  }
}

void QuantizeIQ3_SBlock(const float* x, const float* importance, BlockIQ3_S* block) {
  constexpr size_t kGroups = kQK_K / kGroupElems;
  const IQ3SearchTables& tables = IQ3SSearchTables();
  std::memset(block, 0, sizeof(*block));
  float scales[kGroups];
  float weight[kGroupElems], weight_root[kGroupElems], xval[kGroupElems];
  int8_t levels[kGroupElems];
  // ggml advances these only past groups it writes: after an all-zero group the next group's
  // indices and signs take its place (and the decoder reads them there), so do the same.
  uint8_t* qs = block->qs;
  uint8_t* signs = block->signs;
  float max_scale = 0;
  const float sigma2 = SuperBlockSigma2(x);
  for (size_t ib = 0; ib < kGroups; ++ib) {
    const float* xb = x + kGroupElems * ib;
    GroupWeights(xb, importance ? importance + kGroupElems * ib : nullptr, sigma2, weight,
                 weight_root);
    uint8_t group_signs[kGroupElems / 8];  // one bit per element
    for (int k = 0; k < kGroupElems / 8; ++k) {
      uint8_t bits = 0;
      for (int i = 0; i < 8; ++i) {
        const float value = xb[8 * k + i];
        xval[8 * k + i] = value >= 0 ? value : -value;
        if (!(value >= 0)) bits |= uint8_t(1 << i);
      }
      group_signs[k] = bits;
    }
    const float max = *std::max_element(xval, xval + kGroupElems);
    if (max == 0) {
      scales[ib] = 0;
      continue;
    }
    float scale = SearchGroup(tables, kIQ3SSearch, xval, weight, weight_root, max, levels);
    if (scale < 0) {
      scale = -scale;
      for (uint8_t& bits : group_signs) bits = uint8_t(~bits);
    }
    for (int k = 0; k < kGroupCodes; ++k) {
      const int index = IndexOf(tables, levels + 4 * k);
      const size_t code_pos = kGroupCodes * ib + size_t(k);
      qs[k] = uint8_t(index & 255);
      block->qh[code_pos / 8] |= uint8_t((index >> 8) << (code_pos % 8));
    }
    qs += kGroupCodes;
    std::memcpy(signs, group_signs, sizeof(group_signs));
    signs += sizeof(group_signs);
    scales[ib] = scale;
    max_scale = std::max(max_scale, scale);
  }
  if (max_scale == 0) return;
  const float d = max_scale / 31;
  block->d = F32ToF16(d * 1.033f);  // ggml's fudge factor
  const float inverse_d = 1 / d;
  for (size_t ib = 0; ib < kGroups; ib += 2) {
    block->scales[ib / 2] = uint8_t(GroupScaleIndex(scales[ib], inverse_d) |
                                    GroupScaleIndex(scales[ib + 1], inverse_d) << 4);
  }
}

}  // namespace

void QuantizeIQ3_XXSWeighted(const float* src, void* dst, size_t n, const float* importance) {
  BlockIQ3_XXS* blocks = static_cast<BlockIQ3_XXS*>(dst);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    QuantizeIQ3_XXSBlock(src + i * kQK_K, importance ? importance + i * kQK_K : nullptr,
                         &blocks[i]);
  }
}

void QuantizeIQ3_S(const float* src, void* dst, size_t n) {
  QuantizeIQ3_SWeighted(src, dst, n, nullptr);
}

void QuantizeIQ3_SWeighted(const float* src, void* dst, size_t n, const float* importance) {
  BlockIQ3_S* blocks = static_cast<BlockIQ3_S*>(dst);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    QuantizeIQ3_SBlock(src + i * kQK_K, importance ? importance + i * kQK_K : nullptr, &blocks[i]);
  }
}

}  // namespace petrel::quant
