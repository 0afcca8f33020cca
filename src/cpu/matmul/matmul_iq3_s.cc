// mat_mul for IQ3_S weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h, decode helpers in quant_grid-inl.h), against the activations the mat_mul table
// (matmul_table.h) names.
//
// Per 4 elements a 9-bit index into the 512-row codebook of 4 bytes (a byte of qs and a bit of
// qh); a sign bit per element; per 32 elements a 4-bit scale s. The value is d (2 s + 1) times
// the signed grid byte: 2 s + 1 multiplies the int16 pair sums and d is the float scale.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_iq3_s.cc"
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
  using WBlock = quant::BlockIQ3_S;
  static constexpr DType kType = DType::kIQ3_S;
#if PETREL_QUANT_SIMD
  static HWY_INLINE void Chunk(const WBlock& block, size_t c, QVU8 (&mags)[kQVecs],
                               QVI8 (&signs)[kQVecs]) {
    uint64_t indices;  // the chunk's eight low index bytes, one read
    std::memcpy(&indices, block.qs + 8 * c, sizeof(indices));
    uint32_t sign_bytes;
    std::memcpy(&sign_bytes, block.signs + 4 * c, sizeof(sign_bytes));
    const uint32_t high = block.qh[c];
    uint32_t words[8];
    uint64_t sign_rows[4];
    for (size_t l = 0; l < 4; ++l) {
      const uint32_t i0 = uint32_t(indices >> 16 * l) & 0xFF;
      const uint32_t i1 = uint32_t(indices >> (16 * l + 8)) & 0xFF;
      words[2 * l] = quant::kIQ3SGrid[i0 | ((high << (8 - 2 * l)) & 0x100)];
      words[2 * l + 1] = quant::kIQ3SGrid[i1 | ((high << (7 - 2 * l)) & 0x100)];
      sign_rows[l] = kSignUnits[(sign_bytes >> 8 * l) & 0xFF];
    }
    WordsToChunk(words, mags);
    SignRowsToChunk(sign_rows, signs);
  }
  static HWY_INLINE void ChunkScales(const WBlock& block, size_t c, int16_t& s0, int16_t& s1) {
    s0 = s1 = int16_t(2 * ((block.scales[c / 2] >> (4 * (c % 2))) & 0xF) + 1);
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
