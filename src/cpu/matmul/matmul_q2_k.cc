// mat_mul for Q2_K weights: one Highway foreach_target TU (the driver and dot helpers are in
// quant_dot-inl.h), against the activations the mat_mul table (matmul_table.h) names.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_q2_k.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/matmul/matmul_entry.h"
#include "cpu/matmul/quant_dot-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format : SuperBlockPairFormat<0, true> {
  using WBlock = quant::BlockQ2_K;
  static constexpr DType kType = DType::kQ2_K;
#if PETREL_QUANT_SIMD
  // Chunk C = 4 half + s: levels (qs[32 half + l] >> 2s) & 3; per 16 elements a 4-bit scale
  // (low nibble of scales[i]) and a 4-bit min (high nibble).
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
    int16_t scale16[16];
    for (size_t i = 0; i < 16; ++i) {
      scale16[i] = block.scales[i] & 0xF;
      w.mins[i] = block.scales[i] >> 4;
    }
    SetChunkScales16(scale16, w);
    w.d = HalfToF32(block.d);
    w.dmin = HalfToF32(block.dmin);
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_QUANT_MATMUL_TARGET(Q2_K, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(Q2_K)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
