// mat_mul for Q4_1 weights against Q8_1 activations: one Highway foreach_target TU over the
// rows-in-lanes driver (quant_lanes-inl.h).
//
// Q4_0's nibbles with a scale and a min per block: d q + m. The integer dot is Q4_0's
// (PackNibbles, DotNibbles); one gather fetches d and m of the 8 rows (the block's first word),
// and the min enters through the activation block's s = d_x sum(x): per block and token,
// acc = fma(isum, d_w d_x, acc) then fma(m_w, s_x, acc).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q4_1.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include <cstddef>  // offsetof

#include "cpu/kernel_entry_points.h"
#include "cpu/quant_lanes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format {
  using WBlock = quant::BlockQ4_1;
  static constexpr DType kType = DType::kQ4_1;
  static constexpr DType kActType = DType::kQ8_1;
  static constexpr size_t kElems = quant::kQK;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_1;
  struct Terms {
    float d;  // the activation block's scale
    float s;  // d * sum of its int8 values
  };
  struct Packed {
    QVU8Full q[4];
    hn::Vec<QDF> d, m;
  };

  static HWY_INLINE void ComputeTerms(const XBlock& x, Terms& terms) {
    terms.d = HalfToF32(x.d);
    terms.s = HalfToF32(x.s);
  }

  static HWY_INLINE void Pack(const WBlock* const* HWY_RESTRICT rows,
                              const LaneRowOffsets& offsets, size_t b, Packed& packed) {
    static_assert(offsetof(WBlock, d) == 0 && offsetof(WBlock, m) == 2, "d, m start the block");
    PackNibbles(rows, b, packed.q);
    const auto words = GatherBlockWords<0>(rows, offsets, b);
    packed.d = HalvesToF32<false>(words);
    packed.m = HalvesToF32<true>(words);
  }

  template <size_t T>
  static HWY_INLINE void Dot(const Packed& packed, const XBlock* const* HWY_RESTRICT x,
                             const Terms* const* HWY_RESTRICT terms, size_t b,
                             hn::Vec<QDF> (&acc)[T]) {
    const QDF df;
    hn::Vec<QDI32> isum[T];
    DotNibbles<T>(packed.q, x, b, isum);
    for (size_t t = 0; t < T; ++t) {
      const Terms& xt = terms[t][b];
      acc[t] = hn::MulAdd(hn::ConvertTo(df, isum[t]), hn::Mul(packed.d, hn::Set(df, xt.d)), acc[t]);
      acc[t] = hn::MulAdd(packed.m, hn::Set(df, xt.s), acc[t]);
    }
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

void MatMulQ4_1T(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
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

HWY_EXPORT(MatMulQ4_1T);

void MatMulQ4_1(const void* w, size_t w_row_bytes, size_t n_in, const void* xq, size_t xq_row_bytes,
                size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
                size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulQ4_1T)
  (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
