// mat_mul for Q4_0 weights: one Highway foreach_target TU over the rows-in-lanes driver
// (quant_lanes_driver-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// A block's nibbles are transposed as they are stored (PackNibbles) and dotted with 16-bit pair
// sums (DotNibbles, or Format::Dot's vpdpbusd steps); the level offset 8 goes through the
// activation sums.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_q4_0.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/matmul/matmul_entry.h"
#include "cpu/matmul/quant_lanes_driver-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format
#if PETREL_QUANT_SIMD
    : Lanes32Format<Format, 4, 8>, NibbleQuants<quant::BlockQ4_0>, OffsetPairedStep<Format, 8>
#endif
{
  using WBlock = quant::BlockQ4_0;
  static constexpr DType kType = DType::kQ4_0;
  static constexpr size_t kElems = quant::kQK;
#if PETREL_QUANT_SIMD

  // Per (token, block) activation terms: the scale, and -8 sum(x), the level offset's share of
  // the block's integer dot.
  struct Terms {
    float d;
    int32_t offset_sum;
  };

  static HWY_INLINE void ComputeTerms(const XBlock& x, Terms& terms) {
    terms.d = HalfToF32(x.d);
    terms.offset_sum = -8 * ActivationSum(x);
  }

  // With vpdpbusd (kDotQuads): the low nibbles' chain starts at the offset's share, and the high
  // nibbles are dotted in place (p & 0xF0, 16 times the level) and shifted down once per block,
  // an exact division (at most 16 x 15 x 128 x 16 in a lane), instead of per packed vector.
  // vpmaddubsw's int16 pairs would saturate on 240, so without it DotNibbles stays; so do token
  // tiles (T > 1), where the shift per token outweighs the shifts per vector it saves.
  template <size_t T, bool kDotQuads = kHasDotQuads>
  static HWY_INLINE void Dot(const Packed& packed, const XBlock* const* HWY_RESTRICT x,
                             const Terms* const* HWY_RESTRICT terms, size_t b,
                             hn::Vec<LDF> (&acc)[T]) {
    const LDI32 d32;
    const LDF df;
    hn::Vec<LDI32> isum[T];
    if constexpr (kDotQuads && T == 1) {
      const LDU8 du8;
      const auto low_mask = hn::Set(du8, 0x0F);
      const auto high_mask = hn::Set(du8, 0xF0);
      hn::Vec<LDI32> high_sum[T];
      for (size_t t = 0; t < T; ++t) {
        isum[t] = hn::Set(d32, terms[t][b].offset_sum);
        high_sum[t] = hn::Zero(d32);
      }
      for (size_t s = 0; s < 4; ++s) {
        const auto lo = hn::And(packed.q[s], low_mask);
        const auto hi16 = hn::And(packed.q[s], high_mask);
        for (size_t t = 0; t < T; ++t) {
          isum[t] = DotQuads<kDotQuads>(isum[t], lo, BroadcastQuad(x[t][b].qs + 4 * s));
          high_sum[t] =
              DotQuads<kDotQuads>(high_sum[t], hi16, BroadcastQuad(x[t][b].qs + 4 * (s + 4)));
        }
      }
      for (size_t t = 0; t < T; ++t) isum[t] = hn::Add(isum[t], hn::ShiftRight<4>(high_sum[t]));
    } else {
      DotNibbles<T, kDotQuads>(packed.q, x, b, isum);
      for (size_t t = 0; t < T; ++t) isum[t] = hn::Add(isum[t], hn::Set(d32, terms[t][b].offset_sum));
    }
    for (size_t t = 0; t < T; ++t) {
      acc[t] = hn::MulAdd(hn::ConvertTo(df, isum[t]), hn::Mul(packed.d, hn::Set(df, terms[t][b].d)),
                          acc[t]);
    }
  }

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
  // Single tokens on AVX3_DL stay there, on paired lanes two blocks at a time (OffsetPairedStep,
  // quant_lanes_paired-inl.h): lane 2l + h holds block b + h of row l. The high nibbles are
  // dotted in place and shifted down once, as in Dot.
  template <bool kLast>
  static HWY_INLINE hn::Vec<LDI32> PairedSums(const uint8_t* const* HWY_RESTRICT base,
                                              const OffsetPairTerms& xt) {
    const LDU8 du8;
    constexpr size_t kSecond = kLast ? 0 : sizeof(WBlock);
    QVU8Full q[4];
    TransposeHalves(base, offsetof(WBlock, qs), kSecond + offsetof(WBlock, qs), q);
    auto isum = BroadcastPair(xt.offset_sum), high_sum = hn::Zero(LDI32());
    const auto low_mask = hn::Set(du8, 0x0F), high_mask = hn::Set(du8, 0xF0);
    for (size_t s = 0; s < 4; ++s) {
      isum = DotQuads<true>(isum, hn::And(q[s], low_mask), BroadcastQuadPair(xt.qs + 8 * s));
      high_sum =
          DotQuads<true>(high_sum, hn::And(q[s], high_mask), BroadcastQuadPair(xt.qs + 8 * s + 32));
    }
    return hn::Add(isum, hn::ShiftRight<4>(high_sum));
  }
  static HWY_INLINE hn::Vec<PDF> PairedScales(const uint8_t* const* HWY_RESTRICT base,
                                              size_t offset) {
    return RowHalvesToF32(base, offset);
  }
#endif
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_LANES_MATMUL_TARGET(Q4_0)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(Q4_0)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
