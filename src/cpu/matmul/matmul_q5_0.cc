// mat_mul for Q5_0 weights: one Highway foreach_target TU over the rows-in-lanes driver
// (quant_lanes_driver-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// Q4_0's nibbles plus a fifth bit per element from the block's qh word: PackNibbles transposes
// the nibbles as for Q4_0, one gather fetches the qh words of the kLaneRows rows, and
// FifthBitLevels makes the unsigned levels 0..31, which DotFiveBitLevels multiplies with the
// activations; the offset of 16 enters through the activation block's sum.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_q5_0.cc"
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
    : Lanes32Format<Format, 8, 16>, FiveBitQuants<quant::BlockQ5_0>
#endif
{
  using WBlock = quant::BlockQ5_0;
  static constexpr DType kType = DType::kQ5_0;
  static constexpr size_t kElems = quant::kQK;
};

}  // namespace

PETREL_LANES_MATMUL_TARGET(Q5_0)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(Q5_0)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
