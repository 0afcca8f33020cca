// mat_mul for Q4_0 weights against Q8_0 activations: one Highway foreach_target TU over the
// rows-in-lanes driver (quant_lanes-inl.h).
//
// A block's nibbles are transposed as they are stored (element j in the low nibble of byte j,
// j + 16 in the high one), so that lane l of packed vector s holds bytes 4s..4s+3 of row l: its
// low nibbles are element group s, its high nibbles group s + 4. The 16-bit pair sums of the
// 8 groups are added before widening: a pair is at most 2 x 15 x 127 and a lane adds 8 pairs
// (30480 < 32767), so one maddubs and one 16-bit add per 4 elements and token.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q4_0.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/quant_lanes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format
#if PETREL_QUANT_SIMD
    : Lanes32Format<Format, 4, 8>
#endif
{
  using WBlock = quant::BlockQ4_0;
  static constexpr DType kType = DType::kQ4_0;
  static constexpr DType kActType = DType::kQ8_0;
  static constexpr size_t kElems = quant::kQK;
#if PETREL_QUANT_SIMD

  static HWY_INLINE void PackQuants(const WBlock* const* HWY_RESTRICT rows, size_t b,
                                    QVU8Full (&p)[kPacked]) {
    const uint8_t* src[kLaneRows];
    for (size_t l = 0; l < kLaneRows; ++l) src[l] = rows[l][b].qs;
    TransposeWords(src, p);
  }

  template <size_t T>
  static HWY_INLINE void DotInt(const QVU8Full (&p)[kPacked], const XBlock* const* HWY_RESTRICT x,
                                size_t b, hn::Vec<QDI32> (&isum)[T]) {
    const QDU8 du8;
    const hn::Repartition<uint16_t, QDU8> du16;
    const auto mask = hn::Set(du8, 0x0F);
    hn::Vec<QDI16> sum16[T];
    for (size_t s = 0; s < kPacked; ++s) {
      const auto lo = hn::And(p[s], mask);
      const auto hi = hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, p[s]))), mask);
      for (size_t t = 0; t < T; ++t) {
        const auto prod = hn::Add(MulPairsU8I8(lo, BroadcastQuad(x[t][b].qs + 4 * s)),
                                  MulPairsU8I8(hi, BroadcastQuad(x[t][b].qs + 4 * (s + 4))));
        sum16[t] = s == 0 ? prod : hn::Add(sum16[t], prod);
      }
    }
    const auto ones = hn::Set(QDI16(), 1);
    for (size_t t = 0; t < T; ++t) isum[t] = MulPairsI16(sum16[t], ones);
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

void MatMulQ4_0T(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                 size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                 size_t out_stride, size_t row_begin, size_t row_end) {
  LaneMatMulImpl<Format>(w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride,
                         row_begin, row_end);
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(MatMulQ4_0T);

void MatMulQ4_0(const void* w, size_t w_row_bytes, size_t n_in, const void* xq, size_t xq_row_bytes,
                size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
                size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulQ4_0T)
  (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
