// mat_mul for Q5_K weights against Q8_K activations: one Highway foreach_target TU (the
// driver and dot helpers are in quant_dot-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q5_k.cc"
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
  using WBlock = quant::BlockQ5_K;
  using XBlock = quant::BlockQ8_K;
  using Unpacked = Unpacked256;
  static constexpr size_t kElems = quant::kQK_K;

  static HWY_INLINE void Unpack(const WBlock& block, Unpacked& u) {
    // As Q4_K, plus the fifth bit of element l of sub-block s in bit s of qh[l].
    const hn::CappedTag<int16_t, 16> d16;
    const hn::Rebind<uint8_t, decltype(d16)> d8;
    const auto mask = hn::Set(d16, 0x0F), one = hn::Set(d16, 1);
    for (size_t j = 0; j < 4; ++j) {
      int16_t* q = u.q + 64 * j;
      for (size_t i = 0; i < 32; i += hn::Lanes(d16)) {
        const auto v = hn::PromoteTo(d16, hn::LoadU(d8, block.qs + 32 * j + i));
        const auto h = hn::PromoteTo(d16, hn::LoadU(d8, block.qh + i));
        const auto high0 = hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, int(2 * j)), one));
        const auto high1 = hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, int(2 * j + 1)), one));
        hn::StoreU(hn::Or(hn::And(v, mask), high0), d16, q + i);
        hn::StoreU(hn::Or(hn::ShiftRight<4>(v), high1), d16, q + 32 + i);
      }
      uint8_t sc, m;
      quant::ScaleMinK4(2 * j, block.scales, &sc, &m);
      ScaleLevels(q, 32, sc);
      u.mins[4 * j] = u.mins[4 * j + 1] = m;
      quant::ScaleMinK4(2 * j + 1, block.scales, &sc, &m);
      ScaleLevels(q + 32, 32, sc);
      u.mins[4 * j + 2] = u.mins[4 * j + 3] = m;
    }
    u.d = HalfToF32(block.d);
    u.dmin = HalfToF32(block.dmin);
  }
  static HWY_INLINE void Dot(const Unpacked& u, const XBlock& x, QVecF& acc, float& acc_scalar) {
    DotQ8_KBlock(u, x, acc, acc_scalar, /*has_mins=*/true);
  }
};

}  // namespace

void MatMulQ5_KT(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
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

HWY_EXPORT(MatMulQ5_KT);

void MatMulQ5_K(const void* w, size_t w_row_bytes, size_t n_in, const void* xq, size_t xq_row_bytes,
                size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
                size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulQ5_KT)
  (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
