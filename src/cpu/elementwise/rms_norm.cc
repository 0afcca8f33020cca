// rms_norm: out = x * weight / sqrt(mean(x^2) + eps), with a fixed-order sum of squares.
// `out` may alias `x`: x is read in full for the sum before any element is written.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/elementwise/rms_norm.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include <cmath>

#include "cpu/kernel_entry_points.h"
#include "cpu/simd/simd-inl.h"  // Dot, CopyPadded

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void RmsNormT(const float* x, const float* weight, size_t n, float eps, float* out) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const size_t n_vec = n - n % lanes;
  // The sum of squares is `Dot(x, x)`: its order depends only on n.
  HWY_ALIGN float x_tail[kMaxF32Lanes];
  CopyPadded(x + n_vec, n - n_vec, x_tail);
  const float sum_sq = Dot(d, x, x_tail, x, n);
  const float inv_rms = 1.0f / std::sqrt(sum_sq / float(n) + eps);
  const auto scale = hn::Set(d, inv_rms);
  size_t i = 0;
  for (; i < n_vec; i += lanes) {
    const auto xv = hn::Mul(hn::LoadU(d, x + i), scale);
    hn::StoreU(hn::Mul(xv, hn::LoadU(d, weight + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = (x[i] * inv_rms) * weight[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(RmsNormT);

void RmsNorm(const float* x, const float* weight, size_t n, float eps, float* out) {
  HWY_DYNAMIC_DISPATCH(RmsNormT)(x, weight, n, eps, out);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
