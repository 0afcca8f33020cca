// mat_mul for TQ2_0 weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// Q2_K's bit layout without sub-block scales: 2-bit unsigned levels q (0..3) whose value is
// d (q - 1), the offset subtracted in the int16 pair sums.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_tq2_0.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/matmul_entry.h"
#include "cpu/quant_grid-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format : SuperBlockPairFormat<1, false> {
  using WBlock = quant::BlockTQ2_0;
  static constexpr DType kType = DType::kTQ2_0;
#if PETREL_QUANT_SIMD
  // Chunk C = 4 half + s: levels (qs[32 half + l] >> 2s) & 3.
  static HWY_INLINE void Decode(const WBlock& block, DecodedK& w) {
    const QDU8 du8;
    const hn::Repartition<uint16_t, QDU8> du16;
    constexpr size_t kLanes = hn::MaxLanes(QDU8());
    const auto three = hn::Set(du8, 3);
    for (size_t half = 0; half < 2; ++half) {
      for (size_t v = 0; v < kQVecs; ++v) {
        const size_t i = v * kLanes;
        const auto q16 = hn::BitCast(du16, hn::LoadU(du8, block.qs + 32 * half + i));
        uint8_t* q = w.q + 128 * half + i;
        hn::Store(hn::And(hn::BitCast(du8, q16), three), du8, q);
        hn::Store(hn::And(hn::BitCast(du8, hn::ShiftRight<2>(q16)), three), du8, q + 32);
        hn::Store(hn::And(hn::BitCast(du8, hn::ShiftRight<4>(q16)), three), du8, q + 64);
        hn::Store(hn::And(hn::BitCast(du8, hn::ShiftRight<6>(q16)), three), du8, q + 96);
      }
    }
    const int16_t ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    SetChunkScales32(ones, w);
    w.d = HalfToF32(block.d);
    w.dmin = 0.0f;
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_QUANT_MATMUL_TARGET(TQ2_0, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(TQ2_0)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
