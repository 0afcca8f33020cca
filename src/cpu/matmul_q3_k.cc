// mat_mul for Q3_K weights against Q8_K activations: one Highway foreach_target TU (the
// driver and dot helpers are in quant_dot-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q3_k.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/quant_dot-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format {
  using WBlock = quant::BlockQ3_K;
  using XBlock = quant::BlockQ8_K;
  using Unpacked = Unpacked256;
  static constexpr size_t kElems = quant::kQK_K;

  static HWY_INLINE void Unpack(const WBlock& block, Unpacked& u) {
    // As Q2_K, plus a high bit per element in hmask[e % 32] bit e / 32: level = low - 4 + 4 * high.
    int8_t scales[16];
    quant::UnpackQ3KScales(block.scales, scales);
    const hn::CappedTag<int16_t, 16> d16;
    const hn::Rebind<uint8_t, decltype(d16)> d8;
    const auto three = hn::Set(d16, 3), one = hn::Set(d16, 1), four = hn::Set(d16, 4);
    for (size_t half = 0; half < 2; ++half) {
      for (int plane = 0; plane < 4; ++plane) {
        for (size_t k = 0; k < 2; ++k) {
          const size_t sub = half * 8 + size_t(plane) * 2 + k;
          const auto scale = hn::Set(d16, int16_t(scales[sub]));
          for (size_t i = 0; i < 16; i += hn::Lanes(d16)) {
            const auto v = hn::PromoteTo(d16, hn::LoadU(d8, block.qs + half * 32 + k * 16 + i));
            const auto h = hn::PromoteTo(d16, hn::LoadU(d8, block.hmask + k * 16 + i));
            const auto low = hn::And(hn::ShiftRightSame(v, 2 * plane), three);
            const auto high = hn::And(hn::ShiftRightSame(h, int(half) * 4 + plane), one);
            const auto level = hn::Sub(hn::Add(low, hn::ShiftLeft<2>(high)), four);
            hn::StoreU(hn::Mul(level, scale), d16, u.q + sub * 16 + i);
          }
        }
      }
    }
    u.d = HalfToF32(block.d);
    u.dmin = 0.0f;
  }
  static HWY_INLINE void Dot(const Unpacked& u, const XBlock& x, QVecF& acc, float& acc_scalar) {
    DotQ8_KBlock(u, x, acc, acc_scalar, /*has_mins=*/false);
  }
};

}  // namespace

void MatMulQ3_KT(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                 size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                 size_t out_stride, size_t row_begin, size_t row_end) {
  MatMulQuantImpl<Format>(w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride,
                          row_begin, row_end);
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(MatMulQ3_KT);

void MatMulQ3_K(const void* w, size_t w_row_bytes, size_t n_in, const void* xq, size_t xq_row_bytes,
                size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
                size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulQ3_KT)
  (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
