// mat_mul for IQ3_XXS weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h, decode helpers in quant_grid-inl.h), against the activations the mat_mul table
// (matmul_table.h) names.
//
// Per 4 elements an 8-bit index into the 256-row codebook of 4 bytes; per 32 a uint32 of four
// 7-bit sign groups and a 4-bit scale s. The value is d (s + 1/2) / 2 times the signed grid byte:
// the integer scale 2 s + 1 multiplies the int16 pair sums and d / 4 is the float scale.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_iq3_xxs.cc"
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
  using WBlock = quant::BlockIQ3_XXS;
  static constexpr DType kType = DType::kIQ3_XXS;
#if PETREL_QUANT_SIMD
  static constexpr bool kOneScalePerChunk = true;
  // Chunk c's uint32 of four sign groups and the scale, after the 64 index bytes.
  static HWY_INLINE uint32_t SignsAndScale(const WBlock& block, size_t c) {
    uint32_t aux;
    std::memcpy(&aux, block.qs + quant::kQK_K / 4 + 4 * c, sizeof(aux));
    return aux;
  }
  static HWY_INLINE void Mags(const WBlock& block, size_t c, QVU8 (&mags)[kQVecs]) {
    const uint8_t* indices = block.qs + 8 * c;
    const uint32_t* words[8];
    for (size_t l = 0; l < 8; ++l) words[l] = &quant::kIQ3XXSGrid[indices[l]];
    WordPtrsToChunk(words, mags);
  }
  static HWY_INLINE void SignWords(const WBlock& block, uint32_t (&words)[8]) {
    uint32_t fields[8];
    std::memcpy(fields, block.qs + quant::kQK_K / 4, sizeof(fields));
    EvenSignWords(fields, words);
  }
  static HWY_INLINE void ChunkScales(const WBlock& block, size_t c, int16_t& s0, int16_t& s1) {
    s0 = s1 = int16_t(2 * (SignsAndScale(block, c) >> 28) + 1);
  }
  static HWY_INLINE float Scale(const WBlock& block) { return HalfToF32(block.d) * 0.25f; }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_QUANT_MATMUL_TARGET(IQ3_XXS, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(IQ3_XXS)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
