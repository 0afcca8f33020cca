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
#include "cpu/matmul/quant_grid_vbmi-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format : GridFormat<Format> {
  using WBlock = quant::BlockIQ2_S;
  static constexpr DType kType = DType::kIQ2_S;
#if PETREL_QUANT_SIMD
  static HWY_INLINE void Mags(const WBlock& block, size_t c, QVU8 (&mags)[kQVecs]) {
    const uint8_t* low = block.qs + 4 * c;  // the chunk's four low index bytes
    const uint32_t high = block.qh[c];
    const uint64_t* rows[4];
    for (size_t l = 0; l < 4; ++l) {
      rows[l] = &quant::kIQ2SGrid[low[l] | ((high << (8 - 2 * l)) & 0x300)];
    }
    RowPtrsToChunk(rows, mags);
  }
  // The sign bytes are the sign words as they are stored.
  static HWY_INLINE void SignWords(const WBlock& block, uint32_t (&words)[8]) {
    std::memcpy(words, block.qs + quant::kQK_K / 8, sizeof(words));
  }
  static HWY_INLINE void ChunkScales(const WBlock& block, size_t c, int16_t& s0, int16_t& s1) {
    s0 = int16_t(2 * (block.scales[c] & 0xF) + 1);
    s1 = int16_t(2 * (block.scales[c] >> 4) + 1);
  }
  static HWY_INLINE float Scale(const WBlock& block) { return HalfToF32(block.d) * 0.125f; }
#if HWY_TARGET == HWY_AVX3_DL
  // Codes by permutes (quant_grid_vbmi-inl.h): entry e (elements 8 e..8 e+7) has its low index
  // byte at qs[e] and its index bits 8 and 9 at bits 2 e and 2 e + 1 of the eight qh bytes; the
  // sign bits follow the index bytes in element order.
  static HWY_INLINE GridVbmiBlock Unpack(const WBlock& block) {
    const __m512i indices =
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block.qs)));
    uint64_t high_bits;
    std::memcpy(&high_bits, block.qh, sizeof(high_bits));
    const __mmask64 bit8 = _cvtu64_mask64(_pext_u64(high_bits, 0x5555555555555555ull));
    const __mmask64 bit9 = _cvtu64_mask64(_pext_u64(high_bits, 0xAAAAAAAAAAAAAAAAull));
    GridVbmiBlock unpacked;
    unpacked.low = LookupBytes<1024>(indices, bit8, bit9, kTables.code_low);
    unpacked.high = LookupBytes<1024>(indices, bit8, bit9, kTables.code_high);
    unpacked.signs = _mm512_setzero_si512();
    unpacked.sign_bits = block.qs + quant::kQK_K / 8;
    // Nibble 2 c (elements 32 c..) and 2 c + 1 (32 c + 16..) as stored.
    std::memcpy(&unpacked.scale_nibbles, block.scales, sizeof(unpacked.scale_nibbles));
    return unpacked;
  }
  struct Layout : OctetCodes {
    static constexpr bool kOneScalePerChunk = false;
    static constexpr size_t kSignOffset = 0;  // unused: the bits are in the block
  };
  static HWY_INLINE QVI32 DotBlock(const WBlock& block, const int8_t* HWY_RESTRICT x) {
    return DotGridVbmi<Layout>(Unpack(block), kTables, x);
  }
  static HWY_INLINE void Decode(const WBlock& block, DecodedK& w) {
    DecodeGridVbmi<Layout>(Unpack(block), kTables, w);
    w.d = Scale(block);
    w.dmin = 0.0f;
  }
  static constexpr const GridCodeTables& kTables = kIQ2SCodes;
#endif  // HWY_TARGET == HWY_AVX3_DL
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
