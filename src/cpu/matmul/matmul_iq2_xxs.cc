// mat_mul for IQ2_XXS weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h, decode helpers in quant_grid-inl.h), against the activations the mat_mul table
// (matmul_table.h) names.
//
// Per 32 elements: four 8-bit indices into the 256-row codebook, four 7-bit sign groups and a
// 4-bit scale s. The value is d (s + 1/2) / 4 times the signed grid byte: the integer scale
// 2 s + 1 multiplies the int16 pair sums and d / 8 is the super-block's float scale.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_iq2_xxs.cc"
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
  using WBlock = quant::BlockIQ2_XXS;
  static constexpr DType kType = DType::kIQ2_XXS;
#if PETREL_QUANT_SIMD
  static constexpr bool kOneScalePerChunk = true;
  // Chunk c's two uint32: the four indices, then the sign groups and the scale.
  static HWY_INLINE void Aux(const WBlock& block, size_t c, uint32_t (&aux)[2]) {
    std::memcpy(aux, block.qs + 4 * c, sizeof(aux));
  }
  static HWY_INLINE void Mags(const WBlock& block, size_t c, QVU8 (&mags)[kQVecs]) {
    const uint8_t* indices = reinterpret_cast<const uint8_t*>(block.qs + 4 * c);
    const uint64_t* rows[4];
    for (size_t l = 0; l < 4; ++l) rows[l] = &quant::kIQ2XXSGrid[indices[l]];
    RowPtrsToChunk(rows, mags);
  }
  static HWY_INLINE void SignWords(const WBlock& block, uint32_t (&words)[8]) {
    uint32_t fields[8];
    for (size_t c = 0; c < 8; ++c) std::memcpy(&fields[c], block.qs + 4 * c + 2, sizeof(fields[c]));
    EvenSignWords(fields, words);
  }
  static HWY_INLINE void ChunkScales(const WBlock& block, size_t c, int16_t& s0, int16_t& s1) {
    uint32_t aux[2];
    Aux(block, c, aux);
    s0 = s1 = int16_t(2 * (aux[1] >> 28) + 1);
  }
  static HWY_INLINE float Scale(const WBlock& block) { return HalfToF32(block.d) * 0.125f; }
#if HWY_TARGET == HWY_AVX3_DL
  // Codes and sign bytes by permutes (quant_grid_vbmi-inl.h). Qword c of the block's 64 bytes is
  // chunk c: four index bytes, then the sign groups and the scale. Entry e = 4 c + l (elements
  // 8 e..8 e+7) ends with its index at byte e and its sign group at byte 32 + e.
  static HWY_INLINE GridVbmiBlock Unpack(const WBlock& block) {
    const __m512i q = _mm512_loadu_si512(block.qs);
    // Bytes 0..3 of qword c: the indices; 4..7: the 7-bit sign groups (bits 0, 7, 14, 21 of the
    // second uint32); then the index bytes to 0..31 and the sign groups to 32..63.
    constexpr uint8_t kFieldShifts[8] = {0, 8, 16, 24, 32, 39, 46, 53};
    const __m512i fields =
        _mm512_multishift_epi64_epi8(_mm512_set1_epi64(int64_t(QwordOfBytes(kFieldShifts))), q);
    alignas(64) static constexpr auto kCompact = [] {
      std::array<uint8_t, 64> compact{};
      for (size_t e = 0; e < 32; ++e) {
        compact[e] = uint8_t(8 * (e / 4) + e % 4);
        compact[32 + e] = uint8_t(8 * (e / 4) + 4 + e % 4);
      }
      return compact;
    }();
    const __m512i entries = _mm512_permutexvar_epi8(_mm512_load_si512(kCompact.data()), fields);
    GridVbmiBlock unpacked;
    unpacked.low = LookupBytes<256>(entries, 0, 0, kTables.code_low);
    unpacked.high = LookupBytes<256>(entries, 0, 0, kTables.code_high);
    unpacked.signs = _mm512_permutex2var_epi8(_mm512_load_si512(kTables.signs), entries,
                                              _mm512_load_si512(kTables.signs + 64));
    unpacked.sign_bits = nullptr;
    // Chunk c's s (bits 60..63 of qword c) to byte c.
    unpacked.scale_nibbles =
        NibblesTwice(uint64_t(_mm_cvtsi128_si64(_mm512_cvtepi64_epi8(_mm512_srli_epi64(q, 60)))));
    return unpacked;
  }
  struct Layout : OctetCodes {
    static constexpr bool kOneScalePerChunk = true;
    static constexpr size_t kSignOffset = 32;  // entry e's sign byte at 32 + e
  };
  static HWY_INLINE QVI32 DotBlock(const WBlock& block, const int8_t* HWY_RESTRICT x) {
    return DotGridVbmi<Layout>(Unpack(block), kTables, x);
  }
  static HWY_INLINE void Decode(const WBlock& block, DecodedK& w) {
    DecodeGridVbmi<Layout>(Unpack(block), kTables, w);
    w.d = Scale(block);
    w.dmin = 0.0f;
  }
  static constexpr const GridCodeTables& kTables = kIQ2XXSCodes;
#endif  // HWY_TARGET == HWY_AVX3_DL
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_QUANT_MATMUL_TARGET(IQ2_XXS, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(IQ2_XXS)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
