// rope: rotates pairs of dimensions of each head by this token's angles (interleaved or
// half-split).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/elementwise/rope.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos), on vectors.
template <class D, class V>
HWY_INLINE void Rotate(D d, const float* HWY_RESTRICT cos, const float* HWY_RESTRICT sin, V& x0,
                       V& x1) {
  const V c = hn::LoadU(d, cos), s = hn::LoadU(d, sin);
  const V y0 = hn::NegMulAdd(x1, s, hn::Mul(x0, c));
  const V y1 = hn::MulAdd(x1, c, hn::Mul(x0, s));
  x0 = y0;
  x1 = y1;
}

void RopeT(float* HWY_RESTRICT x, size_t n_heads, size_t head_dim, size_t rot_dims,
           const float* HWY_RESTRICT cos, const float* HWY_RESTRICT sin, RopeStyle style) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const size_t half = rot_dims / 2;
  for (size_t h = 0; h < n_heads; ++h) {
    float* HWY_RESTRICT head = x + h * head_dim;  // (head_dim)
    size_t i = 0;
    switch (style) {
      case RopeStyle::kInterleaved:
        for (; i + lanes <= half; i += lanes) {
          hn::Vec<decltype(d)> x0, x1;
          hn::LoadInterleaved2(d, head + 2 * i, x0, x1);
          Rotate(d, cos + i, sin + i, x0, x1);
          hn::StoreInterleaved2(x0, x1, d, head + 2 * i);
        }
        for (; i < half; ++i) {
          const float x0 = head[2 * i], x1 = head[2 * i + 1];
          head[2 * i] = x0 * cos[i] - x1 * sin[i];
          head[2 * i + 1] = x0 * sin[i] + x1 * cos[i];
        }
        break;
      case RopeStyle::kHalfSplit:
        for (; i + lanes <= half; i += lanes) {
          auto x0 = hn::LoadU(d, head + i), x1 = hn::LoadU(d, head + half + i);
          Rotate(d, cos + i, sin + i, x0, x1);
          hn::StoreU(x0, d, head + i);
          hn::StoreU(x1, d, head + half + i);
        }
        for (; i < half; ++i) {
          const float x0 = head[i], x1 = head[half + i];
          head[i] = x0 * cos[i] - x1 * sin[i];
          head[half + i] = x0 * sin[i] + x1 * cos[i];
        }
        break;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(RopeT);

void Rope(float* x, size_t n_heads, size_t head_dim, size_t rot_dims, const float* cos,
          const float* sin, RopeStyle style) {
  HWY_DYNAMIC_DISPATCH(RopeT)(x, n_heads, head_dim, rot_dims, cos, sin, style);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
