// mat_mul for Q3_K weights: one Highway foreach_target TU (the driver and dot helpers are in
// quant_dot-inl.h), against the activations the mat_mul table (matmul_table.h) names.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_q3_k.cc"
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

struct Format : SuperBlockPairFormat<4, false> {
  using WBlock = quant::BlockQ3_K;
  static constexpr DType kType = DType::kQ3_K;
#if PETREL_QUANT_SIMD
  // Chunk C = 4 half + s: low 2 bits (qs[32 half + l] >> 2s) & 3, high bit C of hmask[l];
  // levels low | high << 2 (0..7) with offset 4, a signed 6-bit scale per 16 elements.
  static HWY_INLINE void Decode(const WBlock& block, DecodedK& w) {
    const QDU8 du8;
    const hn::Repartition<uint16_t, QDU8> du16;
    constexpr size_t kLanes = hn::MaxLanes(QDU8());
    const auto three = hn::Set(du8, 3), four = hn::Set(du8, 4);
    for (size_t half = 0; half < 2; ++half) {
      for (size_t v = 0; v < kQVecs; ++v) {
        const size_t i = v * kLanes;
        const auto q16 = hn::BitCast(du16, hn::LoadU(du8, block.qs + 32 * half + i));
        const auto h = hn::LoadU(du8, block.hmask + i);
        const auto lows = {hn::BitCast(du8, q16), hn::BitCast(du8, hn::ShiftRight<2>(q16)),
                           hn::BitCast(du8, hn::ShiftRight<4>(q16)),
                           hn::BitCast(du8, hn::ShiftRight<6>(q16))};
        size_t s = 0;
        for (const auto& low : lows) {
          const size_t chunk = 4 * half + s++;
          const auto bit = hn::Set(du8, uint8_t(1u << chunk));
          hn::Store(hn::Or(hn::And(low, three), hn::IfThenElseZero(hn::TestBit(h, bit), four)), du8,
                    w.q + 32 * chunk + i);
        }
      }
    }
    int8_t scales[16];
    quant::UnpackQ3KScales(block.scales, scales);
    int16_t scale16[16];
    for (size_t i = 0; i < 16; ++i) scale16[i] = scales[i];
    SetChunkScales16(scale16, w);
    w.d = HalfToF32(block.d);
    w.dmin = 0.0f;
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_QUANT_MATMUL_TARGET(Q3_K, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(Q3_K)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
