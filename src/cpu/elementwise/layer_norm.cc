// layer_norm and the exact (erf) GELU: the encoder's element-wise ops. Plain loops: they touch
// each activation once per block, next to matrix products that read every weight, so SIMD would
// not show; the sums run in double in a fixed order, so results depend only on the row.
#include <cmath>

#include "cpu/kernel_entry_points.h"

namespace petrel::cpu {

void LayerNorm(const float* x, const float* weight, const float* bias, size_t n, float eps,
               float* out) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / double(n);
  double sum_sq = 0.0;
  for (size_t i = 0; i < n; ++i) sum_sq += (double(x[i]) - mean) * (double(x[i]) - mean);
  const float inv_std = float(1.0 / std::sqrt(sum_sq / double(n) + double(eps)));
  const float mean_f = float(mean);
  // `out` may alias `x`: every x[i] is read before out[i] is written.
  for (size_t i = 0; i < n; ++i) {
    const float normed = (x[i] - mean_f) * inv_std * weight[i];
    out[i] = bias ? normed + bias[i] : normed;
  }
}

void Gelu(const float* x, size_t n, float* out) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  for (size_t i = 0; i < n; ++i) out[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
}

}  // namespace petrel::cpu
