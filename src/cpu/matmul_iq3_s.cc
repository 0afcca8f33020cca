// mat_mul for IQ3_S weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h, decode helpers in quant_grid-inl.h), against the activations the mat_mul table
// (matmul_table.h) names.
//
// Per 4 elements a 9-bit index into the 512-row codebook of 4 bytes (a byte of qs and a bit of
// qh); a sign bit per element; per 32 elements a 4-bit scale s. The value is d (2 s + 1) times
// the signed grid byte: 2 s + 1 multiplies the int16 pair sums and d is the float scale.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_iq3_s.cc"
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

struct Format : GridFormat<Format> {
  using WBlock = quant::BlockIQ3_S;
  static constexpr DType kType = DType::kIQ3_S;
#if PETREL_QUANT_SIMD
  static HWY_INLINE void Chunk(const WBlock& block, size_t c, QVU8 (&mags)[kQVecs],
                               QVI8 (&signs)[kQVecs]) {
    const uint32_t high = block.qh[c];
    uint64_t rows[4], sign_rows[4];
    for (size_t l = 0; l < 4; ++l) {
      const uint8_t* index = block.qs + 8 * c + 2 * l;
      const uint32_t i0 = index[0] | ((high << (8 - 2 * l)) & 0x100);
      const uint32_t i1 = index[1] | ((high << (7 - 2 * l)) & 0x100);
      rows[l] = quant::kIQ3SGrid[i0] | uint64_t(quant::kIQ3SGrid[i1]) << 32;
      sign_rows[l] = kSignUnits[block.signs[4 * c + l]];
    }
    RowsToChunk(rows, mags);
    SignRowsToChunk(sign_rows, signs);
  }
  static HWY_INLINE void Scales16(const WBlock& block, int16_t (&scale16)[16]) {
    for (size_t c = 0; c < 8; ++c) {
      const int16_t scale = int16_t(2 * ((block.scales[c / 2] >> (4 * (c % 2))) & 0xF) + 1);
      scale16[2 * c] = scale16[2 * c + 1] = scale;
    }
  }
  static HWY_INLINE float Scale(const WBlock& block) { return HalfToF32(block.d); }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_QUANT_MATMUL_TARGET(IQ3_S, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(IQ3_S)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
