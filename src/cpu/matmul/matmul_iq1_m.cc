// mat_mul for IQ1_M weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h, decode helpers in quant_grid-inl.h), against the activations the mat_mul table
// (matmul_table.h) names.
//
// Per 8 elements an 11-bit index into IQ1_S's codebook and the sign of a delta of 1/8; per 16 a
// 3-bit scale s; the f16 super-block scale d is spread over the scales' top nibbles. The value
// is d (2 s + 1) (g +- 1/8): the integer levels 8 g +- 1 times 2 s + 1 go through the int16
// pair sums and d / 8 is the float scale.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_iq1_m.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include <cstring>

#include "cpu/kernel_entry_points.h"
#include "cpu/matmul/matmul_entry.h"
#include "cpu/matmul/quant_grid-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format : GridFormat<Format> {
  using WBlock = quant::BlockIQ1_M;
  static constexpr DType kType = DType::kIQ1_M;
#if PETREL_QUANT_SIMD
  static HWY_INLINE void Chunk(const WBlock& block, size_t c, QVU8 (&mags)[kQVecs],
                               QVI8 (&levels)[kQVecs]) {
    uint64_t rows[4];
    int8_t delta[4];
    for (size_t l = 0; l < 4; ++l) {
      // Each qh byte: bits 0..2 the high index bits of the first 8 elements, bit 3 their
      // delta's sign; bits 4..7 the same for the next 8.
      const uint32_t high = uint32_t(block.qh[2 * c + l / 2]) >> (4 * (l % 2));
      rows[l] = quant::kIQ1SGrid[block.qs[4 * c + l] | ((high & 7) << 8)];
      delta[l] = (high & 8) ? -1 : 1;
    }
    IQ1Chunk(rows, delta, mags, levels);
  }
  // The four uint16 of scales: 3-bit scales per 16 elements in bits 0..11, d's bits on top.
  static HWY_INLINE void ChunkScales(const WBlock& block, size_t c, int16_t& s0, int16_t& s1) {
    uint16_t sc;
    std::memcpy(&sc, block.scales + 2 * (c / 2), sizeof(sc));
    const uint32_t scales = uint32_t(sc) >> (6 * (c % 2));
    s0 = int16_t(2 * (scales & 7) + 1);
    s1 = int16_t(2 * ((scales >> 3) & 7) + 1);
  }
  static HWY_INLINE float Scale(const WBlock& block) {
    uint16_t sc[4];
    std::memcpy(sc, block.scales, sizeof(sc));
    const uint16_t d_bits = uint16_t((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                     ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
    return HalfToF32(d_bits) * 0.125f;
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_QUANT_MATMUL_TARGET(IQ1_M, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(IQ1_M)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
