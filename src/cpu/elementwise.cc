// Element-wise kernels: silu_mul (SwiGLU feed-forward) and add (residual).
// `out` may alias an input (in-place residual add), so no pointer here is HWY_RESTRICT.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/elementwise.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/simd-inl.h"               // CopyPadded, kMaxF32Lanes
#include "hwy/contrib/math/math-inl.h"  // Exp
#include "hwy/foreach_target.h"         // IWYU pragma: keep

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// silu(g) * u = g / (1 + exp(-g)) * u. Exp is only valid up to +104, so -g is clamped at 88,
// where the quotient is already below 1e-36.
template <class D, class V>
HWY_INLINE V SiluMulVec(D d, V g, V u) {
  const V e = hn::Exp(d, hn::Min(hn::Neg(g), hn::Set(d, 88.0f)));
  return hn::Mul(hn::Div(g, hn::Add(hn::Set(d, 1.0f), e)), u);
}

void SiluMulT(const float* gate, const float* up, size_t n, float* out) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(SiluMulVec(d, hn::LoadU(d, gate + i), hn::LoadU(d, up + i)), d, out + i);
  }
  if (i < n) {  // The tail goes through the same vector code, zero-padded.
    HWY_ALIGN float g_tail[kMaxF32Lanes], u_tail[kMaxF32Lanes], out_tail[kMaxF32Lanes];
    CopyPadded(gate + i, n - i, g_tail);
    CopyPadded(up + i, n - i, u_tail);
    hn::Store(SiluMulVec(d, hn::Load(d, g_tail), hn::Load(d, u_tail)), d, out_tail);
    for (size_t j = 0; i + j < n; ++j) out[i + j] = out_tail[j];
  }
}

void AddT(const float* a, const float* b, size_t n, float* out) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Add(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(SiluMulT);
HWY_EXPORT(AddT);

void SiluMul(const float* gate, const float* up, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(SiluMulT)(gate, up, n, out);
}

void Add(const float* a, const float* b, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(AddT)(a, b, n, out);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
