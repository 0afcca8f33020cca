// mat_mul for Q4_1 weights: one Highway foreach_target TU over the rows-in-lanes driver
// (quant_lanes_driver-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// Q4_0's nibbles with a scale and a min per block, d q + m: Q4_0's integer dot (PackNibbles,
// DotNibbles) inside LanesMinFormat, which handles d and m.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_q4_1.cc"
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
    : LanesMinFormat<Format, 4>, NibbleQuants<quant::BlockQ4_1>
#endif
{
  using WBlock = quant::BlockQ4_1;
  static constexpr DType kType = DType::kQ4_1;
  static constexpr size_t kElems = quant::kQK;
};

}  // namespace

PETREL_LANES_MATMUL_TARGET(Q4_1)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(Q4_1)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
