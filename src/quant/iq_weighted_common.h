// What the IQ1 and IQ2 importance-matrix quantizers (iq1_weighted.cc, iq2_weighted.cc) share,
// copied from ggml alike: one definition each.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/blocks.h"
#include "quant/iq2_search.h"

namespace petrel::quant {

// ggml's MAX: the first argument unless the second is larger (NaN and signed zeros included).
inline float GgmlMax(float a, float b) { return a > b ? a : b; }

inline int ClampInt(int value, int lo, int hi) {
  return value < lo ? lo : value > hi ? hi : value;
}

// The sum of squares of a super-block's kQK_K values.
inline float SuperBlockSumOfSquares(const float* x) {
  float sum = 0;
  for (size_t i = 0; i < kQK_K; ++i) sum += x[i] * x[i];
  return sum;
}

// The search-table key of a group's 8 levels (2 bits each).
inline IQ2Key LevelsKey(const int8_t* levels) {
  IQ2Key key = 0;
  for (int i = 0; i < 8; ++i) key = IQ2Key(key | (levels[i] << (2 * i)));
  return key;
}

}  // namespace petrel::quant
