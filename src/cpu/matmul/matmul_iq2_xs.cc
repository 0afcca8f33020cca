// mat_mul for IQ2_XS weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h, decode helpers in quant_grid-inl.h), against the activations the mat_mul table
// (matmul_table.h) names.
//
// Per 8 elements a uint16: a 9-bit index into the 512-row codebook and 7 sign bits; per 16 a
// 4-bit scale s. The value is d (s + 1/2) / 4 times the signed grid byte: the integer scale
// 2 s + 1 multiplies the int16 pair sums and d / 8 is the super-block's float scale.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_iq2_xs.cc"
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
  using WBlock = quant::BlockIQ2_XS;
  static constexpr DType kType = DType::kIQ2_XS;
#if PETREL_QUANT_SIMD
  static HWY_INLINE void Chunk(const WBlock& block, size_t c, QVU8 (&mags)[kQVecs],
                               QVI8 (&signs)[kQVecs]) {
    uint64_t packed;  // the chunk's four uint16, one read
    std::memcpy(&packed, block.qs + 4 * c, sizeof(packed));
    uint64_t rows[4], sign_rows[4];
    for (size_t l = 0; l < 4; ++l) {
      const uint32_t word = uint32_t(packed >> 16 * l);
      rows[l] = quant::kIQ2XSGrid[word & 0x1FF];
      sign_rows[l] = kIQ2SignUnits[(word >> 9) & 0x7F];
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

PETREL_QUANT_MATMUL_TARGET(IQ2_XS, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(IQ2_XS)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
