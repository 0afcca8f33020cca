// mat_mul for Q5_K weights: one Highway foreach_target TU (the driver and dot helpers are in
// quant_dot-inl.h), against the activations the mat_mul table (matmul_table.h) names.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q5_k.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/matmul_entry.h"
#include "cpu/quant_dot-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format : SuperBlockPairFormat<0, true> {
  using WBlock = quant::BlockQ5_K;
  static constexpr DType kType = DType::kQ5_K;
#if PETREL_QUANT_SIMD
  // As Q4_K plus a fifth bit per element: bit 2j of qh[l] for chunk 2j, bit 2j + 1 for 2j + 1.
  static HWY_INLINE void Decode(const WBlock& block, DecodedK& w) {
    const QDU8 du8;
    const hn::Repartition<uint16_t, QDU8> du16;
    constexpr size_t kLanes = hn::MaxLanes(QDU8());
    const auto mask = hn::Set(du8, 0x0F), sixteen = hn::Set(du8, 0x10);
    for (size_t j = 0; j < 4; ++j) {
      const auto bit_lo = hn::Set(du8, uint8_t(1u << (2 * j)));
      const auto bit_hi = hn::Set(du8, uint8_t(2u << (2 * j)));
      for (size_t v = 0; v < kQVecs; ++v) {
        const auto q = hn::LoadU(du8, block.qs + 32 * j + v * kLanes);
        const auto h = hn::LoadU(du8, block.qh + v * kLanes);
        const auto lo =
            hn::Or(hn::And(q, mask), hn::IfThenElseZero(hn::TestBit(h, bit_lo), sixteen));
        const auto hi =
            hn::Or(hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, q))), mask),
                   hn::IfThenElseZero(hn::TestBit(h, bit_hi), sixteen));
        hn::Store(lo, du8, w.q + 64 * j + v * kLanes);
        hn::Store(hi, du8, w.q + 64 * j + 32 + v * kLanes);
      }
    }
    int16_t scale32[8];
    for (size_t j = 0; j < 8; ++j) {
      uint8_t sc, m;
      quant::ScaleMinK4(j, block.scales, &sc, &m);
      scale32[j] = sc;
      w.mins[2 * j] = w.mins[2 * j + 1] = m;
    }
    SetChunkScales32(scale32, w);
    w.d = HalfToF32(block.d);
    w.dmin = HalfToF32(block.dmin);
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_QUANT_MATMUL_TARGET(Q5_K, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(Q5_K)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
