// mat_mul for Q8_0 weights: one Highway foreach_target TU over the rows-in-lanes driver
// (quant_lanes_driver-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// Lane l of packed vector g holds bytes 4g..4g+3 of row l (element group g). Both operands are
// signed: DotSignedGroups.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q8_0.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/matmul_entry.h"
#include "cpu/quant_lanes_driver-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format
#if PETREL_QUANT_SIMD
    : Lanes32Format<Format, 8, 0>
#endif
{
  using WBlock = quant::BlockQ8_0;
  static constexpr DType kType = DType::kQ8_0;
  static constexpr size_t kElems = quant::kQK;
#if PETREL_QUANT_SIMD

  static HWY_INLINE void PackQuants(const WBlock* const* HWY_RESTRICT rows,
                                    const LaneRowOffsets& /*offsets*/, size_t b,
                                    QVU8Full (&p)[kPacked]) {
    const uint8_t* src[kLaneRows];
    QVU8Full half[4];
    for (size_t h = 0; h < 2; ++h) {
      for (size_t l = 0; l < kLaneRows; ++l)
        src[l] = reinterpret_cast<const uint8_t*>(rows[l][b].qs) + 16 * h;
      TransposeWords(src, half);
      for (size_t s = 0; s < 4; ++s) p[4 * h + s] = half[s];
    }
  }

  template <size_t T, bool kDotQuads = kHasDotQuads>
  static HWY_INLINE void DotInt(const QVU8Full (&p)[kPacked], const XBlock* const* HWY_RESTRICT x,
                                size_t b, hn::Vec<LDI32> (&isum)[T]) {
    DotSignedGroups<kPacked, T, kDotQuads>(p, x, b, isum);
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_LANES_MATMUL_TARGET(Q8_0)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(Q8_0)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
