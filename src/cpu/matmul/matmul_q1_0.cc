// mat_mul for Q1_0 weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// A block is 128 sign bits sharing one f16 scale d: element j is +d where bit j is set, else -d.
// Each of its four 32-element sub-blocks meets one Q8_0 block as unsigned levels 2 bit (0 or 2)
// with an offset of 1, the offset subtracted in the int16 pair sums.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_q1_0.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/matmul/matmul_entry.h"
#include "cpu/matmul/quant_grid-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format {
  using WBlock = quant::BlockQ1_0;
  static constexpr DType kType = DType::kQ1_0;
  static constexpr size_t kElems = quant::kQK1_0;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_0;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 1;
  static constexpr bool kHasMin = false;
  static constexpr size_t kDecodeRows = 2;  // see MatMulQuantImpl
  static constexpr size_t kTileRows = kQuantTileRows32;
  static constexpr size_t kTileTokens = kQuantTileTokens32;

  static HWY_INLINE void Decode(const WBlock& block, size_t sub, Decoded32<false>& w) {
    const QDU8 du8;
    constexpr size_t kLanes = hn::MaxLanes(QDU8());
    const auto two = hn::Set(du8, 2);
    for (size_t v = 0; v < kQVecs; ++v) {
      const auto set = hn::LoadMaskBits(du8, block.qs + 4 * sub + v * kLanes / 8);
      w.q[v] = hn::IfThenElseZero(set, two);
    }
    w.d = HalfToF32(block.d);
    w.m = 0.0f;
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_QUANT_MATMUL_TARGET(Q1_0, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(Q1_0)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
