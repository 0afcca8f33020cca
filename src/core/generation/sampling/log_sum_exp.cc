// Built with -fno-trapping-math (meson.build): without it GCC keeps the clamp below as a branch,
// since a compare could raise a floating-point exception nothing here enables, and the loop
// stays scalar. With it, 8 lanes at a time: libm's scalar double exp over a 32k vocabulary was
// 4 % of a 32-stream server's CPU time, on the thread that every step waits for.
#include "core/generation/sampling/log_sum_exp.h"

#include <bit>
#include <cmath>
#include <cstdint>

namespace petrel {
namespace {

// exp(x) for x <= 0: x = n ln 2 + r with |r| <= ln 2 / 2, e^r by its Taylor polynomial to degree
// 7, 2^n put in the exponent bits. Below -87 (where 2^n would leave the normal range) x is
// clamped.
inline float ExpNonPositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // rounded to an integer
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;     // x - n ln 2, in two parts
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>((int32_t(n) + 127) << 23);
}

}  // namespace

double LogSumExp(const float* logits, size_t n) {
  float max_logit = -INFINITY;
  bool nan = false;
  for (size_t i = 0; i < n; ++i) {
    nan |= std::isnan(logits[i]);
    max_logit = logits[i] > max_logit ? logits[i] : max_logit;
  }
  if (nan) return NAN;
  if (!std::isfinite(max_logit)) return max_logit;
  constexpr size_t kLanes = 8, kBlock = 256;
  double sum = 0.0;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    float lanes[kLanes] = {};
    for (size_t j = i; j < i + kBlock; j += kLanes) {
      for (size_t k = 0; k < kLanes; ++k) lanes[k] += ExpNonPositive(logits[j + k] - max_logit);
    }
    for (float lane : lanes) sum += lane;
  }
  for (; i < n; ++i) sum += ExpNonPositive(logits[i] - max_logit);
  return double(max_logit) + std::log(sum);
}

}  // namespace petrel
