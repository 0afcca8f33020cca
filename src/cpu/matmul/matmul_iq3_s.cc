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
  static constexpr bool kOneScalePerChunk = true;
  static HWY_INLINE void Mags(const WBlock& block, size_t c, QVU8 (&mags)[kQVecs]) {
    const uint8_t* indices = block.qs + 8 * c;  // the chunk's eight low index bytes
    const uint32_t high = block.qh[c];
    const uint32_t* words[8];
    for (size_t i = 0; i < 8; ++i) {
      words[i] = &quant::kIQ3SGrid[indices[i] | ((high << (8 - i)) & 0x100)];
    }
    WordPtrsToChunk(words, mags);
  }
  // The sign bytes are the sign words as they are stored.
  static HWY_INLINE void SignWords(const WBlock& block, uint32_t (&words)[8]) {
    std::memcpy(words, block.signs, sizeof(words));
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
