// Element-wise kernels: silu_mul (SwiGLU feed-forward), gelu_mul (GeGLU), add (residual),
// scale and softcap.
// `out` may alias an input (in-place residual add), so no pointer here is HWY_RESTRICT.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/elementwise/elementwise.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/simd/simd-inl.h"               // CopyPadded, kMaxF32Lanes
#include "hwy/contrib/math/math-inl.h"  // Exp, Tanh
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

// Applies `op(d, vectors...)` over n elements of the inputs; the tail goes through the same vector
// code, zero-padded, so every element gets the same operations.
template <class Op>
HWY_INLINE void Map1(const float* x, size_t n, float* out, Op op) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(op(d, hn::LoadU(d, x + i)), d, out + i);
  if (i < n) {
    HWY_ALIGN float x_tail[kMaxF32Lanes], out_tail[kMaxF32Lanes];
    CopyPadded(x + i, n - i, x_tail);
    hn::Store(op(d, hn::Load(d, x_tail)), d, out_tail);
    for (size_t j = 0; i + j < n; ++j) out[i + j] = out_tail[j];
  }
}

// gelu(g) * u with GELU's tanh form, 0.5 g (1 + tanh(z)), z = sqrt(2/pi) (g + 0.044715 g^3), in
// float: no lookup table (an fp16 table moves Gemma's logits by 1e-2). Computed as the equal
// g / (1 + exp(-2z)), which avoids the cancellation of 1 + tanh(z) for negative g (relative
// errors of 1e-3 at g = -4 in float). -2z is clamped at 88 like silu's exponent.
template <class D, class V>
HWY_INLINE V GeluMulVec(D d, V g, V u) {
  const V minus_2z = hn::Mul(hn::Set(d, -1.5957691216057308f),
                             hn::MulAdd(hn::Mul(hn::Set(d, 0.044715f), hn::Mul(g, g)), g, g));
  const V e = hn::Exp(d, hn::Min(minus_2z, hn::Set(d, 88.0f)));
  return hn::Mul(hn::Div(g, hn::Add(hn::Set(d, 1.0f), e)), u);
}

void GeluMulT(const float* gate, const float* up, size_t n, float* out) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(GeluMulVec(d, hn::LoadU(d, gate + i), hn::LoadU(d, up + i)), d, out + i);
  }
  if (i < n) {
    HWY_ALIGN float g_tail[kMaxF32Lanes], u_tail[kMaxF32Lanes], out_tail[kMaxF32Lanes];
    CopyPadded(gate + i, n - i, g_tail);
    CopyPadded(up + i, n - i, u_tail);
    hn::Store(GeluMulVec(d, hn::Load(d, g_tail), hn::Load(d, u_tail)), d, out_tail);
    for (size_t j = 0; i + j < n; ++j) out[i + j] = out_tail[j];
  }
}

void ScaleT(const float* x, float factor, size_t n, float* out) {
  Map1(x, n, out, [factor](auto d, auto v) { return hn::Mul(v, hn::Set(d, factor)); });
}

void SoftcapT(const float* x, float cap, size_t n, float* out) {
  Map1(x, n, out, [cap](auto d, auto v) {
    return hn::Mul(hn::Set(d, cap), hn::Tanh(d, hn::Div(v, hn::Set(d, cap))));
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(SiluMulT);
HWY_EXPORT(AddT);
HWY_EXPORT(GeluMulT);
HWY_EXPORT(ScaleT);
HWY_EXPORT(SoftcapT);

void GeluMul(const float* gate, const float* up, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(GeluMulT)(gate, up, n, out);
}

void Scale(const float* x, float factor, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(ScaleT)(x, factor, n, out);
}

void Softcap(const float* x, float cap, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(SoftcapT)(x, cap, n, out);
}

void SiluMul(const float* gate, const float* up, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(SiluMulT)(gate, up, n, out);
}

void Add(const float* a, const float* b, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(AddT)(a, b, n, out);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
