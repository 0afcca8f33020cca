// mat_mul for TQ1_0 weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h, decode helpers in quant_grid-inl.h), against the activations the mat_mul table
// (matmul_table.h) names.
//
// Five base-3 digits per byte (four in qh), most significant first: unsigned levels q (0..2)
// whose value is d (q - 1), the offset subtracted in the int16 pair sums. Bytes 0..31 of qs give
// elements 32 n + m (digit n of byte m), bytes 32..47 elements 160 + 16 n + m, qh elements
// 240 + 4 n + m.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_tq1_0.cc"
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

struct Format : SuperBlockPairFormat<1, false> {
  using WBlock = quant::BlockTQ1_0;
  static constexpr DType kType = DType::kTQ1_0;
#if PETREL_QUANT_SIMD
  static HWY_INLINE void Decode(const WBlock& block, DecodedK& w) {
    StoreTernaryDigits16(block.qs, 32, w.q);
    StoreTernaryDigits16(block.qs + 16, 32, w.q + 16);
    StoreTernaryDigits16(block.qs + 32, 16, w.q + 160);
    StoreTernaryDigits4(block.qh, w.q + 240);
    const int16_t ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    SetChunkScales32(ones, w);
    w.d = HalfToF32(block.d);
    w.dmin = 0.0f;
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_QUANT_MATMUL_TARGET(TQ1_0, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(TQ1_0)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
