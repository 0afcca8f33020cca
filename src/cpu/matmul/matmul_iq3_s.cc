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
#include "cpu/matmul/quant_grid_vbmi-inl.h"

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
#if HWY_TARGET == HWY_AVX3_DL
  // Codes by permutes (quant_grid_vbmi-inl.h): entry e (elements 4 e..4 e+3) has its low index
  // byte at qs[e] and its ninth bit at bit e of the eight qh bytes; the sign bits are in element
  // order.
  static HWY_INLINE GridVbmiBlock Unpack(const WBlock& block) {
    const __m512i indices = _mm512_loadu_si512(block.qs);
    uint64_t high_bits;
    std::memcpy(&high_bits, block.qh, sizeof(high_bits));
    const __mmask64 bit8 = _cvtu64_mask64(high_bits);
    GridVbmiBlock unpacked;
    unpacked.low = LookupBytes<512>(indices, bit8, 0, kTables.code_low);
    unpacked.high = LookupBytes<512>(indices, bit8, 0, kTables.code_high);
    unpacked.signs = _mm512_setzero_si512();
    unpacked.sign_bits = block.signs;
    // Chunk c's nibble (stored as nibble c) to byte c, then twice.
    uint32_t scale_bytes;
    std::memcpy(&scale_bytes, block.scales, sizeof(scale_bytes));
    unpacked.scale_nibbles = NibblesTwice(_pdep_u64(scale_bytes, 0x0F0F0F0F0F0F0F0Full));
    return unpacked;
  }
  struct Layout : QuadCodes {
    static constexpr bool kOneScalePerChunk = true;
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
  static constexpr const GridCodeTables& kTables = kIQ3SCodes;
#endif  // HWY_TARGET == HWY_AVX3_DL
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
