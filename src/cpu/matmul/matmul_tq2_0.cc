// mat_mul for TQ2_0 weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// Q2_K's bit layout without sub-block scales: 2-bit unsigned levels q (0..3) whose value is
// d (q - 1). Every token dots each block straight from its bytes (DotBlock): the level products
// and the activation sums (for the offset) in int16 pair sums, widened once per block.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_tq2_0.cc"
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
  using WBlock = quant::BlockTQ2_0;
  static constexpr DType kType = DType::kTQ2_0;
#if PETREL_QUANT_SIMD
  // Every token takes DotBlock: unpacking the levels is a shift and a mask per 32 elements.
  static constexpr bool kDotBlockAlways = true;
  // Prompt tiles of 2 rows x 4 tokens: each token's activation loads and offset sums (the
  // vpdpbusd against ones) are the same for both rows, so they are made once per tile.
  static constexpr size_t kTileRows = 2;

  // Chunk C = 4 half + s: levels (qs[32 half + l] >> 2s) & 3, valued level - 1. The int16 pair
  // sums of level x and of x (for the offset) each stay below 8 x 2 x 3 x 128 over the 8 chunks,
  // so they widen to int32 once per block.
  static HWY_INLINE QVI32 DotBlock(const WBlock& block, const int8_t* HWY_RESTRICT x) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    // Both halves in one 512-bit vector: chunk s in the low 256 bits (x at 32 s), chunk 4 + s in
    // the high ones (x at 128 + 32 s); the halves' lanes are added at the end, which gives the
    // same int32 lanes as the 256-bit loop below. With VNNI the products go straight into int32
    // lanes (vpdpbusd), the same exact sums.
    const __m512i q = _mm512_loadu_si512(block.qs);
    const __m512i three = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
    __m512i level_sum = _mm512_setzero_si512(), x_sum = _mm512_setzero_si512();
    for (size_t s = 0; s < 4; ++s) {
      const __m512i levels =
          _mm512_and_si512(_mm512_srl_epi16(q, _mm_cvtsi32_si128(int(2 * s))), three);
      const __m512i xv = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * s))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 128 + 32 * s)), 1);
      if constexpr (kHasDotQuads) {
        level_sum = DotQuadsAdd(hn::Vec512<int32_t>{level_sum}, hn::Vec512<uint8_t>{levels},
                                hn::Vec512<int8_t>{xv})
                        .raw;
        x_sum = DotQuadsAdd(hn::Vec512<int32_t>{x_sum}, hn::Vec512<uint8_t>{one},
                            hn::Vec512<int8_t>{xv})
                    .raw;
      } else {
        level_sum = _mm512_add_epi16(level_sum, _mm512_maddubs_epi16(levels, xv));
        x_sum = _mm512_add_epi16(x_sum, _mm512_maddubs_epi16(one, xv));
      }
    }
    if constexpr (!kHasDotQuads) {
      const __m512i ones16 = _mm512_set1_epi16(1);
      level_sum = _mm512_madd_epi16(level_sum, ones16);
      x_sum = _mm512_madd_epi16(x_sum, ones16);
    }
    const __m512i sum = _mm512_sub_epi32(level_sum, x_sum);
    return QVI32{_mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1))};
#else
    const QDU8 du8;
    const QDI8 d8;
    const QDI16 d16;
    const hn::Repartition<uint16_t, QDU8> du16;
    constexpr size_t kLanes = hn::MaxLanes(QDU8());
    const auto three = hn::Set(du8, 3), one = hn::Set(du8, 1);
    QVI16 level_sum = hn::Zero(d16), x_sum = hn::Zero(d16);
    for (size_t half = 0; half < 2; ++half) {
      for (size_t v = 0; v < kQVecs; ++v) {
        const size_t i = v * kLanes;
        const auto q16 = hn::BitCast(du16, hn::LoadU(du8, block.qs + 32 * half + i));
        const QVU8 levels[4] = {hn::And(hn::BitCast(du8, q16), three),
                                hn::And(hn::BitCast(du8, hn::ShiftRight<2>(q16)), three),
                                hn::And(hn::BitCast(du8, hn::ShiftRight<4>(q16)), three),
                                hn::And(hn::BitCast(du8, hn::ShiftRight<6>(q16)), three)};
        for (size_t s = 0; s < 4; ++s) {
          const auto xv = hn::LoadU(d8, x + 32 * (4 * half + s) + i);
          level_sum = hn::Add(level_sum, MulPairsU8I8(levels[s], xv));
          x_sum = hn::Add(x_sum, MulPairsU8I8(one, xv));
        }
      }
    }
    const auto ones = hn::Set(d16, 1);
    return hn::Sub(MulPairsI16(level_sum, ones), MulPairsI16(x_sum, ones));
#endif
  }
  static HWY_INLINE float Scale(const WBlock& block) { return HalfToF32(block.d); }

  // Unused (DotBlock serves every tile); kept for the driver's shape.
  static HWY_INLINE void Decode(const WBlock& block, DecodedK& w) {
    (void)block;
    (void)w;
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
