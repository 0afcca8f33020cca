// mat_mul for IQ4_XS weights: one Highway foreach_target TU over the rows-in-lanes driver
// (quant_lanes_driver-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// A super-block is eight IQ4_NL-like sub-blocks of 32 (16 nibble bytes each, indexing the
// non-linear grid) with a 6-bit signed scale each and one f16 d. Packed, each sub-block is
// IQ4_NL's packed block (PackGridNibbles: signed levels); the scales of the kLaneRows rows are
// decoded as int32 lanes from two gathered words. Per token and sub-block, DotSignedGroups gives
// the exact int32 dot, which is multiplied by the sub-block scale and summed over the super-block
// (at most 8 x 32 x 127 x 127 x 32, well inside int32), then scaled by d_w d_x once.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_iq4_xs.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include <cstddef>  // offsetof

#include "cpu/kernel_entry_points.h"
#include "cpu/matmul_entry.h"
#include "cpu/quant_lanes_driver-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format {
  using WBlock = quant::BlockIQ4_XS;
  static constexpr DType kType = DType::kIQ4_XS;
  static constexpr size_t kElems = quant::kQK_K;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_K;
  // Single tokens on AVX3_DL stay on the 512-bit code (16-row groups) rather than hop to the
  // AVX2 code: with the row streams fetched ahead, that measured faster for this format. Were
  // they to hop, the 256-bit vpdpbusd step measured no faster than vpmaddubsw there
  // (docs/PERFORMANCE.md).
  static constexpr bool kSingleTokenDotQuads = false;
  static constexpr bool kSingleTokenFullWidth = true;
  struct Terms {
    float d;
  };
  struct Packed {
    // Defined here, inside the target region: GCC compiles the implicit constructor of a
    // struct of vectors without the target's options, and then cannot inline the vectors'
    // constructors into it on AArch64 NEON ("target specific option mismatch").
    HWY_INLINE Packed() {}
    QVU8Full q[8][8];           // sub-block ib: IQ4_NL's packed groups
    hn::Vec<LDI32> scales[8];   // sub-block ib: each row's scale (-32..31)
    hn::Vec<LDF> d;
  };

  static HWY_INLINE void ComputeTerms(const XBlock& x, Terms& terms) { terms.d = x.d; }

  static HWY_INLINE void Pack(const WBlock* const* HWY_RESTRICT rows, const LaneRowOffsets& offsets,
                              size_t b, Packed& packed) {
    static_assert(offsetof(WBlock, d) == 0 && offsetof(WBlock, scales_h) == 2 &&
                      offsetof(WBlock, scales_l) == 4,
                  "d, scales_h, scales_l start the block");
    for (size_t ib = 0; ib < 8; ++ib) {
      const uint8_t* src[kLaneRows];
      for (size_t l = 0; l < kLaneRows; ++l) src[l] = rows[l][b].qs + 16 * ib;
      PackGridNibbles(src, packed.q[ib]);
    }
    // quant::IQ4XSScale for kLaneRows rows at once: low 4 bits from scales_l (nibble ib of the word
    // at byte 4), high 2 bits from scales_h (bits 2 ib of the upper half of the word at byte 0).
    const LDU32 du32;
    const auto w0 = GatherBlockWords<0>(rows, offsets, b);
    const auto low_words = GatherBlockWords<offsetof(WBlock, scales_l)>(rows, offsets, b);
    const auto high_words = hn::ShiftRight<16>(w0);
    const auto four = hn::Set(du32, 0xF), three = hn::Set(du32, 3);
    const auto bias = hn::Set(LDI32(), 32);
    Unroll<8>([&](auto ib_constant) HWY_ATTR {
      constexpr int ib = decltype(ib_constant)::value;
      const auto low = hn::And(hn::ShiftRight<4 * ib>(low_words), four);
      const auto high = hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2 * ib>(high_words), three));
      packed.scales[ib] = hn::Sub(hn::BitCast(LDI32(), hn::Or(low, high)), bias);
    });
    packed.d = HalvesToF32<false>(w0);
  }

  template <size_t T, bool kDotQuads = kHasDotQuads>
  static HWY_INLINE void Dot(const Packed& packed, const XBlock* const* HWY_RESTRICT x,
                             const Terms* const* HWY_RESTRICT terms, size_t b,
                             hn::Vec<LDF> (&acc)[T]) {
    const LDF df;
    hn::Vec<LDI32> total[T];
    for (size_t ib = 0; ib < 8; ++ib) {
      hn::Vec<LDI32> isum[T];
      DotSignedGroups<8, T, kDotQuads>(packed.q[ib], x, b, isum, 32 * ib);
      for (size_t t = 0; t < T; ++t) {
        const auto scaled = hn::Mul(isum[t], packed.scales[ib]);
        total[t] = ib == 0 ? scaled : hn::Add(total[t], scaled);
      }
    }
    for (size_t t = 0; t < T; ++t) {
      acc[t] = hn::MulAdd(hn::ConvertTo(df, total[t]), hn::Mul(packed.d, hn::Set(df, terms[t][b].d)),
                          acc[t]);
    }
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_LANES_MATMUL_TARGET(IQ4_XS)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(IQ4_XS)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
