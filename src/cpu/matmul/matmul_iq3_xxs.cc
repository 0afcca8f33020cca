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
#include <array>
#include <cstring>

#include "cpu/kernel_entry_points.h"
#include "cpu/matmul/matmul_entry.h"
#include "cpu/matmul/quant_grid-inl.h"
#include "cpu/matmul/quant_grid_vbmi-inl.h"

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
#if HWY_TARGET == HWY_AVX3_DL
  // Codes and sign bytes by permutes (quant_grid_vbmi-inl.h): entry e (elements 4 e..4 e+3) has
  // its code at byte e of the looked-up vectors; group g of chunk c (elements 32 c + 8 g..) its
  // sign byte at byte 4 c + g of `signs`.
  static HWY_INLINE GridVbmiBlock Unpack(const WBlock& block) {
    const __m512i indices = _mm512_loadu_si512(block.qs);
    // Qword c: chunk c's uint32 of sign groups (bits 0, 7, 14, 21) and scale (bits 28..31).
    const __m512i words = _mm512_cvtepu32_epi64(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block.qs + quant::kQK_K / 4)));
    constexpr uint8_t kGroupShifts[8] = {0, 7, 14, 21, 0, 0, 0, 0};
    const __m512i groups =
        _mm512_multishift_epi64_epi8(_mm512_set1_epi64(int64_t(QwordOfBytes(kGroupShifts))), words);
    GridVbmiBlock unpacked;
    unpacked.low = LookupBytes<256>(indices, 0, 0, kTables.code_low);
    unpacked.high = LookupBytes<256>(indices, 0, 0, kTables.code_high);
    // Each chunk's four sign bytes from bytes 8 c..8 c+3 to 4 c..4 c+3: element order.
    unpacked.signs = _mm512_castsi256_si512(_mm512_cvtepi64_epi32(_mm512_permutex2var_epi8(
        _mm512_load_si512(kTables.signs), groups, _mm512_load_si512(kTables.signs + 64))));
    unpacked.sign_bits = nullptr;
    unpacked.scale_nibbles = NibblesTwice(
        uint64_t(_mm_cvtsi128_si64(_mm512_cvtepi64_epi8(_mm512_srli_epi64(words, 28)))));
    return unpacked;
  }
  struct Layout : QuadCodes {
    static constexpr bool kOneScalePerChunk = true;
    static constexpr size_t kSignOffset = 0;
  };
  static HWY_INLINE QVI32 DotBlock(const WBlock& block, const int8_t* HWY_RESTRICT x) {
    return DotGridVbmi<Layout>(Unpack(block), kTables, x);
  }
  static HWY_INLINE void Decode(const WBlock& block, DecodedK& w) {
    DecodeGridVbmi<Layout>(Unpack(block), kTables, w);
    w.d = Scale(block);
    w.dmin = 0.0f;
  }
  static constexpr const GridCodeTables& kTables = kIQ3XXSCodes;
#endif  // HWY_TARGET == HWY_AVX3_DL
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
