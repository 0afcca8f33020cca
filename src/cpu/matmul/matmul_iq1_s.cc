// mat_mul for IQ1_S weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h, decode helpers in quant_grid-inl.h), against the activations the mat_mul table
// (matmul_table.h) names.
//
// Per 8 elements an 11-bit index into the 2048-row codebook of -1, 0, +1 bytes; per 32 a 3-bit
// scale s and the sign of a delta of 1/8. The value is d (2 s + 1) (g +- 1/8): the integer levels
// 8 g +- 1 times 2 s + 1 go through the int16 pair sums and d / 8 is the float scale.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_iq1_s.cc"
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

struct Format : GridFormat<Format> {
  using WBlock = quant::BlockIQ1_S;
  static constexpr DType kType = DType::kIQ1_S;
#if PETREL_QUANT_SIMD
  static HWY_INLINE void Chunk(const WBlock& block, size_t c, QVU8 (&mags)[kQVecs],
                               QVI8 (&levels)[kQVecs]) {
    const uint32_t high = block.qh[c];
    const int8_t sign = (high & 0x8000) ? -1 : 1;
    const int8_t delta[4] = {sign, sign, sign, sign};
    uint64_t rows[4];
    for (size_t l = 0; l < 4; ++l) {
      rows[l] = quant::kIQ1SGrid[block.qs[4 * c + l] | (((high >> 3 * l) & 7) << 8)];
    }
    IQ1Chunk(rows, delta, mags, levels);
  }
  static HWY_INLINE void ChunkScales(const WBlock& block, size_t c, int16_t& s0, int16_t& s1) {
    s0 = s1 = int16_t(2 * ((block.qh[c] >> 12) & 7) + 1);
  }
  static HWY_INLINE float Scale(const WBlock& block) { return HalfToF32(block.d) * 0.125f; }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_QUANT_MATMUL_TARGET(IQ1_S, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(IQ1_S)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
