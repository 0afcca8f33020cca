// mat_mul for MXFP4 weights: one Highway foreach_target TU over the rows-in-lanes driver
// (quant_lanes_driver-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// IQ4_NL's packing with the E2M1 grid (doubled to integers: 0, 1, 2, 3, 4, 6, 8, 12 and their
// negatives) and a power-of-two E8M0 scale in place of the f16 one, halved to undo the doubling:
// the packed block is Q8_0's signed int8 levels, dotted by DotSignedGroups.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_mxfp4.cc"
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

#if PETREL_QUANT_SIMD
// kMXFP4Values as bytes, and + 12, unsigned for vpdpbusd (0..24; the paired single-token step's
// levels).
alignas(16) inline constexpr std::array<uint8_t, 16> kMXFP4Grid = GridBytes<0>(quant::kMXFP4Values);
alignas(16) inline constexpr std::array<uint8_t, 16> kMXFP4UnsignedGrid =
    GridBytes<12>(quant::kMXFP4Values);

// The E8M0 exponents e (one per int32 lane) as the scales 2^(e - 128) (half of 2^(e - 127), to
// undo the doubled grid), as float bits (e - 1) << 23, or the subnormals 2^-128 and 2^-127 for
// e = 0 and 1.
template <class D32>
HWY_INLINE hn::Vec<hn::Repartition<float, D32>> HalvedE8M0Scales(D32 d32, hn::Vec<D32> e) {
  const auto normal = hn::ShiftLeft<23>(hn::Sub(e, hn::Set(d32, 1)));
  const auto subnormal = hn::IfThenElse(hn::Eq(e, hn::Zero(d32)), hn::Set(d32, 0x00200000),
                                        hn::Set(d32, 0x00400000));
  return hn::BitCast(hn::Repartition<float, D32>(),
                     hn::IfThenElse(hn::Lt(e, hn::Set(d32, 2)), subnormal, normal));
}
#endif

struct Format
#if PETREL_QUANT_SIMD
    : Lanes32Format<Format, 8, 0>, OffsetPairedStep<Format, 12>
#endif
{
  using WBlock = quant::BlockMXFP4;
  static constexpr DType kType = DType::kMXFP4;
  static constexpr size_t kElems = quant::kQK;
#if PETREL_QUANT_SIMD
  static HWY_INLINE void PackQuants(const WBlock* const* HWY_RESTRICT rows,
                                    const LaneRowOffsets& /*offsets*/, size_t b,
                                    QVU8Full (&p)[kPacked]) {
    const uint8_t* src[kLaneRows];
    for (size_t l = 0; l < kLaneRows; ++l) src[l] = rows[l][b].qs;
    PackGridNibbles(src, p, kMXFP4Grid.data());
  }

  // Lanes32Format's Pack with the E8M0 scales (HalvedE8M0Scales).
  static HWY_INLINE void Pack(const WBlock* const* HWY_RESTRICT rows, const LaneRowOffsets& offsets,
                              size_t b, Packed& packed) {
    const LDI32 d32;
    PackQuants(rows, offsets, b, packed.q);
    static_assert(offsetof(WBlock, e) == 0, "the exponent starts the block");
    hn::Vec<LDI32> e;
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
    if constexpr (kLaneRows == 8) {
      // The 8 exponent bytes inserted, rather than a gather (as LaneScales does for f16 scales).
      e = hn::Vec<LDI32>{InsertBytesToI32([&](size_t l) { return &rows[l][b].e; })};
    } else
#endif
    {
      e = hn::And(hn::BitCast(d32, GatherBlockWords<0>(rows, offsets, b)), hn::Set(d32, 0xFF));
    }
    packed.d = HalvedE8M0Scales(d32, e);
  }

  template <size_t T, bool kDotQuads = kHasDotQuads>
  static HWY_INLINE void DotInt(const QVU8Full (&p)[kPacked], const XBlock* const* HWY_RESTRICT x,
                                size_t b, hn::Vec<LDI32> (&isum)[T]) {
    DotSignedGroups<kPacked, T, kDotQuads>(p, x, b, isum);
  }

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
  // Single tokens on AVX3_DL stay there, on paired lanes two blocks at a time (OffsetPairedStep,
  // quant_lanes_paired-inl.h): lane 2l + h holds block b + h of row l, its levels + 12.
  template <bool kLast>
  static HWY_INLINE hn::Vec<LDI32> PairedSums(const uint8_t* const* HWY_RESTRICT base,
                                              const OffsetPairTerms& xt) {
    return PairedGridNibbleSums<kLast, sizeof(WBlock), offsetof(WBlock, qs)>(
        base, xt, kMXFP4UnsignedGrid.data());
  }
  static HWY_INLINE hn::Vec<PDF> PairedScales(const uint8_t* const* HWY_RESTRICT base,
                                              size_t offset) {
    return HalvedE8M0Scales(
        PDI32(), hn::Vec<PDI32>{InsertBytesToI32([&](size_t l) { return base[l] + offset; })});
  }
#endif
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_LANES_MATMUL_TARGET(MXFP4)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(MXFP4)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
