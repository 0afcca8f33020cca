// mat_mul for IQ2_S weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h, decode helpers in quant_grid-inl.h), against the activations the mat_mul table
// (matmul_table.h) names.
//
// Per 8 elements a 10-bit index into the 1024-row codebook (a byte of qs and two bits of qh) and
// a byte of sign bits; per 16 a 4-bit scale s. The value is d (s + 1/2) / 4 times the signed grid
// byte: the integer scale 2 s + 1 multiplies the int16 pair sums and d / 8 is the float scale.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_iq2_s.cc"
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
  using WBlock = quant::BlockIQ2_S;
  static constexpr DType kType = DType::kIQ2_S;
#if PETREL_QUANT_SIMD
  static HWY_INLINE void Chunk(const WBlock& block, size_t c, QVU8 (&mags)[kQVecs],
                               QVI8 (&signs)[kQVecs]) {
    uint32_t low, sign_bytes;  // the chunk's four index bytes and four sign bytes, one read each
    std::memcpy(&low, block.qs + 4 * c, sizeof(low));
    std::memcpy(&sign_bytes, block.qs + quant::kQK_K / 8 + 4 * c, sizeof(sign_bytes));
    const uint32_t high = block.qh[c];
    uint64_t rows[4], sign_rows[4];
    for (size_t l = 0; l < 4; ++l) {
      const uint32_t index = ((low >> 8 * l) & 0xFF) | ((high << (8 - 2 * l)) & 0x300);
      rows[l] = quant::kIQ2SGrid[index];
      sign_rows[l] = kSignUnits[(sign_bytes >> 8 * l) & 0xFF];
    }
    RowsToChunk(rows, mags);
    SignRowsToChunk(sign_rows, signs);
  }
  static HWY_INLINE void ChunkScales(const WBlock& block, size_t c, int16_t& s0, int16_t& s1) {
    s0 = int16_t(2 * (block.scales[c] & 0xF) + 1);
    s1 = int16_t(2 * (block.scales[c] >> 4) + 1);
  }
  static HWY_INLINE float Scale(const WBlock& block) { return HalfToF32(block.d) * 0.125f; }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_QUANT_MATMUL_TARGET(IQ2_S, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(IQ2_S)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
