// mat_mul for Q6_K weights against Q8_K activations: one Highway foreach_target TU (the
// driver and dot helpers are in quant_dot-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q6_k.cc"
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
  using WBlock = quant::BlockQ6_K;
  using XBlock = quant::BlockQ8_K;
  using Unpacked = Unpacked256;
  static constexpr size_t kElems = quant::kQK_K;

  static HWY_INLINE void Unpack(const WBlock& block, Unpacked& u) {
    // Per 128 elements: 64 bytes of low nibbles (ql), 32 bytes of 2-bit high parts (qh); element
    // l + 32 k (k = 0..3) takes nibble k / 2 of ql[l + 32 (k % 2)] and bits 2k of qh[l].
    const hn::CappedTag<int16_t, 16> d16;
    const hn::Rebind<uint8_t, decltype(d16)> d8;
    const auto mask = hn::Set(d16, 0x0F), three = hn::Set(d16, 3), bias = hn::Set(d16, 32);
    for (size_t half = 0; half < 2; ++half) {
      const uint8_t* ql = block.ql + 64 * half;
      const uint8_t* qh = block.qh + 32 * half;
      for (size_t c = 0; c < 32; c += 16) {
        const size_t sub = half * 8 + c / 16;  // sub-block of element half * 128 + c
        for (size_t i = c; i < c + 16; i += hn::Lanes(d16)) {
          const auto a = hn::PromoteTo(d16, hn::LoadU(d8, ql + i));
          const auto b = hn::PromoteTo(d16, hn::LoadU(d8, ql + i + 32));
          const auto h = hn::PromoteTo(d16, hn::LoadU(d8, qh + i));
          const auto q1 = hn::Or(hn::And(a, mask), hn::ShiftLeft<4>(hn::And(h, three)));
          const auto q2 =
              hn::Or(hn::And(b, mask), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(h), three)));
          const auto q3 =
              hn::Or(hn::ShiftRight<4>(a), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(h), three)));
          const auto q4 = hn::Or(hn::ShiftRight<4>(b), hn::ShiftLeft<4>(hn::ShiftRight<6>(h)));
          int16_t* q = u.q + 128 * half + i;
          hn::StoreU(hn::Mul(hn::Sub(q1, bias), hn::Set(d16, block.scales[sub])), d16, q);
          hn::StoreU(hn::Mul(hn::Sub(q2, bias), hn::Set(d16, block.scales[sub + 2])), d16, q + 32);
          hn::StoreU(hn::Mul(hn::Sub(q3, bias), hn::Set(d16, block.scales[sub + 4])), d16, q + 64);
          hn::StoreU(hn::Mul(hn::Sub(q4, bias), hn::Set(d16, block.scales[sub + 6])), d16, q + 96);
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

void MatMulQ6_KT(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
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

HWY_EXPORT(MatMulQ6_KT);

void MatMulQ6_K(const void* w, size_t w_row_bytes, size_t n_in, const void* xq, size_t xq_row_bytes,
                size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
                size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulQ6_KT)
  (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
