// mat_mul for IQ4_NL weights: one Highway foreach_target TU over the rows-in-lanes driver
// (quant_lanes_driver-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// A block is Q4_0's layout with a non-linear grid: its nibbles are transposed as Q4_0's (lane l
// of vector s holds bytes 4s..4s+3 of row l, low nibbles group s, high nibbles group s + 4) and
// then index the grid by one byte shuffle each, at pack time (PackGridNibbles). The packed
// block is then Q8_0's: signed int8 levels (|level| <= 127), dotted by DotSignedGroups.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_iq4_nl.cc"
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
    : Lanes32Format<Format, 8, 0>, OffsetPairedStep<Format, 128>
#endif
{
  using WBlock = quant::BlockIQ4_NL;
  static constexpr DType kType = DType::kIQ4_NL;
  static constexpr size_t kElems = quant::kQK;
#if PETREL_QUANT_SIMD
  static HWY_INLINE void PackQuants(const WBlock* const* HWY_RESTRICT rows,
                                    const LaneRowOffsets& /*offsets*/, size_t b,
                                    QVU8Full (&p)[kPacked]) {
    const uint8_t* src[kLaneRows];
    for (size_t l = 0; l < kLaneRows; ++l) src[l] = rows[l][b].qs;
    PackGridNibbles(src, p);
  }

  template <size_t T, bool kDotQuads = kHasDotQuads>
  static HWY_INLINE void DotInt(const QVU8Full (&p)[kPacked], const XBlock* const* HWY_RESTRICT x,
                                size_t b, hn::Vec<LDI32> (&isum)[T]) {
    DotSignedGroups<kPacked, T, kDotQuads>(p, x, b, isum);
  }

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
  // Single tokens on AVX3_DL stay there, on paired lanes two blocks at a time (OffsetPairedStep,
  // quant_lanes_paired-inl.h): lane 2l + h holds block b + h of row l, its levels + 128.
  template <bool kLast>
  static HWY_INLINE hn::Vec<LDI32> PairedSums(const uint8_t* const* HWY_RESTRICT base,
                                              const OffsetPairTerms& xt) {
    alignas(16) static constexpr std::array<uint8_t, 16> kUnsignedGrid =
        GridBytes<128>(quant::kIQ4NLValues);
    return PairedGridNibbleSums<kLast, sizeof(WBlock), offsetof(WBlock, qs)>(
        base, xt, kUnsignedGrid.data());
  }
  static HWY_INLINE hn::Vec<PDF> PairedScales(const uint8_t* const* HWY_RESTRICT base,
                                              size_t offset) {
    return RowHalvesToF32(base, offset);
  }
#endif
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_LANES_MATMUL_TARGET(IQ4_NL)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(IQ4_NL)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
