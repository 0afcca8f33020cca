// Codebook decoding by byte permutes for AVX3_DL (AVX-512 VBMI), for the formats whose grid rows
// are a few levels each (IQ2_XXS, IQ2_S: 8 elements of 3 levels; IQ3_XXS, IQ3_S: 4 of 8).
//
// Why: on the other targets each grid row is a load and a blend into place, several per 32
// elements, and the sign bits go through a table in memory; that bounds those kernels at a few
// GB/s. Here each grid row becomes a code of 2- or 3-bit level numbers (16 bits at most), found
// for 64 indices at once by 128-byte `vpermi2b` lookups (a low and a high code byte per index,
// the index bits above the seventh choosing among the lookups); `vpmultishiftqb` then spreads
// each element's level number into its own byte and one `vpermb` turns level numbers into
// levels. Sign bits become a mask register under which the activations are negated. The
// integers are those of DotGridK and DecodeGridK (quant_grid-inl.h): the same unsigned
// magnitudes times the same signed activations and scales, in the same int32 lanes (element
// 4i..4i+3 of each chunk in lane i), so every target still gives the same results.

#if defined(PETREL_CPU_QUANT_GRID_VBMI_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PETREL_CPU_QUANT_GRID_VBMI_INL_H_
#undef PETREL_CPU_QUANT_GRID_VBMI_INL_H_
#else
#define PETREL_CPU_QUANT_GRID_VBMI_INL_H_
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/matmul/grid_code_tables.h"  // GridCodeTables
#include "cpu/matmul/quant_grid-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3_DL
// A qword of eight bytes, byte k = bytes[k].
constexpr uint64_t QwordOfBytes(const uint8_t (&bytes)[8]) {
  uint64_t qword = 0;
  for (size_t k = 0; k < 8; ++k) qword |= uint64_t(bytes[k]) << (8 * k);
  return qword;
}

// Byte i: table[idx[i] + 256 bit8[i] + 512 bit9[i]] for a table of kEntries (256, 512 or 1024)
// bytes: two-register lookups on the low seven bits of each index, the higher bits choosing
// among them.
template <size_t kEntries>
HWY_INLINE __m512i LookupBytes(__m512i idx, __mmask64 bit8, __mmask64 bit9,
                               const uint8_t* HWY_RESTRICT table) {
  const __mmask64 bit7 = _mm512_movepi8_mask(idx);
  const auto lookup256 = [&](const uint8_t* t) HWY_ATTR {
    const __m512i low =
        _mm512_permutex2var_epi8(_mm512_load_si512(t), idx, _mm512_load_si512(t + 64));
    const __m512i high =
        _mm512_permutex2var_epi8(_mm512_load_si512(t + 128), idx, _mm512_load_si512(t + 192));
    return _mm512_mask_blend_epi8(bit7, low, high);
  };
  const __m512i first = lookup256(table);
  if constexpr (kEntries == 256) {
    (void)bit8;
    (void)bit9;
    return first;
  } else {
    const __m512i below512 = _mm512_mask_blend_epi8(bit8, first, lookup256(table + 256));
    if constexpr (kEntries == 512) {
      (void)bit9;
      return below512;
    } else {
      static_assert(kEntries == 1024);
      const __m512i above512 =
          _mm512_mask_blend_epi8(bit8, lookup256(table + 512), lookup256(table + 768));
      return _mm512_mask_blend_epi8(bit9, below512, above512);
    }
  }
}

// One super-block's codes, signs and scales, as the steps read them: `low` and `high` hold
// the code bytes of the entries where the Layout's CodeIndex finds them; the sign bits (one per
// element, in element order) are at `sign_bits`, or, where that is null, at byte
// Layout::kSignOffset of `signs`; nibble n of `scale_nibbles` is the s of elements 16 n..16 n+15
// (integer scale 2 s + 1).
struct GridVbmiBlock {
  __m512i low, high, signs;
  const uint8_t* sign_bits;
  uint64_t scale_nibbles;
};

// Each byte's low nibble twice (byte c = s becomes nibbles 2 c and 2 c + 1), for formats with one
// scale per chunk.
HWY_INLINE uint64_t NibblesTwice(uint64_t bytes) { return bytes * 0x11; }

// Rows of eight int16 lanes of 2 s + 1: a step's scale vector is four of them broadcast from
// memory (loads, where building it in registers took the shuffle port these kernels are short
// of).
struct OddScaleRows {
  alignas(16) int16_t rows[16][8];
};
constexpr OddScaleRows MakeOddScaleRows() {
  OddScaleRows table{};
  for (int16_t s = 0; s < 16; ++s) {
    for (size_t i = 0; i < 8; ++i) table.rows[s][i] = int16_t(2 * s + 1);
  }
  return table;
}
inline constexpr OddScaleRows kOddScaleRows = MakeOddScaleRows();

// The int16 scale lanes of chunks 2 j, 2 j + 1: lanes 8 m..8 m+7 are 2 s + 1 of nibble 4 j + m.
// kOneScalePerChunk: nibbles 2 c and 2 c + 1 are equal (two rows instead of four).
template <bool kOneScalePerChunk>
HWY_INLINE __m512i GridVbmiScales(uint64_t scale_nibbles, size_t j) {
  const uint64_t nibbles = scale_nibbles >> (16 * j);
  const auto row = [&](size_t m) HWY_ATTR {
    const int16_t* scale_row = kOddScaleRows.rows[(nibbles >> (4 * m)) & 15];
    return _mm_load_si128(reinterpret_cast<const __m128i*>(scale_row));
  };
  if constexpr (kOneScalePerChunk) {
    return _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(row(0)), 0xFF00, row(2));
  } else {
    __m512i scales = _mm512_broadcast_i32x4(row(0));
    scales = _mm512_mask_broadcast_i32x4(scales, 0x00F0, row(1));
    scales = _mm512_mask_broadcast_i32x4(scales, 0x0F00, row(2));
    return _mm512_mask_broadcast_i32x4(scales, 0xF000, row(3));
  }
}

// The mask of the negative elements of 64 j..64 j+63 from their bits in element order.
HWY_INLINE __mmask64 NegativeFromBits(const uint8_t* HWY_RESTRICT sign_bits, size_t j) {
  uint64_t bits;
  std::memcpy(&bits, sign_bits + 8 * j, sizeof(bits));
  return _cvtu64_mask64(bits);
}

// Where the sign bits are: in the block, or stored from `signs` into `stored` (one store per
// super-block, then a mask load per step: moving them from a vector register to a mask register
// would take a shuffle each).
template <class Layout>
HWY_INLINE const uint8_t* SignBits(const GridVbmiBlock& block, uint8_t* HWY_RESTRICT stored) {
  if (block.sign_bits != nullptr) return block.sign_bits;
  _mm512_store_si512(stored, block.signs);
  ReadBackFromMemory(stored);
  return stored + Layout::kSignOffset;
}

// Elements 64 j..64 j+63 (chunks 2 j and 2 j + 1): the magnitudes. A Layout gives, for qword q
// of the vector (elements 8 q..8 q+7), the bytes of low:high that hold its codes (CodeIndex, a
// `vpermi2b` index) and the multishift control that spreads its level numbers (kSpread).
template <class Layout>
HWY_INLINE __m512i GridVbmiMags(const GridVbmiBlock& block, const GridCodeTables& tables,
                                size_t j) {
  const __m512i codes = _mm512_permutex2var_epi8(block.low, Layout::CodeIndex(j), block.high);
  const __m512i numbers = _mm512_multishift_epi64_epi8(_mm512_set1_epi64(Layout::kSpread), codes);
  return _mm512_permutexvar_epi8(numbers, _mm512_load_si512(tables.levels));
}

// DotGridK's int32 lanes for one super-block.
template <class Layout>
HWY_INLINE QVI32 DotGridVbmi(const GridVbmiBlock& block, const GridCodeTables& tables,
                             const int8_t* HWY_RESTRICT x) {
  alignas(64) uint8_t stored_signs[64];
  const uint8_t* sign_bits = SignBits<Layout>(block, stored_signs);
  __m512i sum = _mm512_setzero_si512();
  for (size_t j = 0; j < 4; ++j) {
    const __m512i mags = GridVbmiMags<Layout>(block, tables, j);
    const __mmask64 negative = NegativeFromBits(sign_bits, j);
    const __m512i xv = _mm512_loadu_si512(x + 64 * j);
    const __m512i signed_x = _mm512_mask_sub_epi8(xv, negative, _mm512_setzero_si512(), xv);
    const __m512i pairs = _mm512_maddubs_epi16(mags, signed_x);
    const __m512i scales = GridVbmiScales<Layout::kOneScalePerChunk>(block.scale_nibbles, j);
    sum = _mm512_add_epi32(sum, _mm512_madd_epi16(pairs, scales));
  }
  return QVI32{_mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1))};
}

// DecodeGridK's levels and chunk scales for one super-block (w.d and w.dmin are the caller's).
template <class Layout>
HWY_INLINE void DecodeGridVbmi(const GridVbmiBlock& block, const GridCodeTables& tables,
                               DecodedK& w) {
  alignas(64) uint8_t stored_signs[64];
  const uint8_t* sign_bits = SignBits<Layout>(block, stored_signs);
  for (size_t j = 0; j < 4; ++j) {
    const __m512i mags = GridVbmiMags<Layout>(block, tables, j);
    const __mmask64 negative = NegativeFromBits(sign_bits, j);
    _mm512_store_si512(w.q + 64 * j,
                       _mm512_mask_sub_epi8(mags, negative, _mm512_setzero_si512(), mags));
    _mm512_store_si512(w.scales[2 * j],
                       GridVbmiScales<Layout::kOneScalePerChunk>(block.scale_nibbles, j));
  }
}

// Layouts of the code bytes. Entries of 8 elements (IQ2), entry e's code at byte e of low and
// of high: qword q of step j is entry 8 j + q.
struct OctetCodes {
  static HWY_INLINE __m512i CodeIndex(size_t j) {
    alignas(64) static constexpr auto kBase = [] {
      std::array<uint8_t, 64> base{};
      for (size_t q = 0; q < 8; ++q) {
        for (size_t k = 0; k < 8; ++k) base[8 * q + k] = uint8_t(k == 1 ? 64 + q : q);
      }
      return base;
    }();
    return _mm512_add_epi8(_mm512_load_si512(kBase.data()), _mm512_set1_epi8(char(8 * j)));
  }
  static constexpr int64_t kSpread = 0x0E0C0A0806040200;  // element k: bits 2 k..
};
// Entries of 4 elements (IQ3), entry e's code at byte e: qword q of step j holds entries
// 16 j + 2 q and 16 j + 2 q + 1, their codes at bits 0.. and 16.. of it.
struct QuadCodes {
  static HWY_INLINE __m512i CodeIndex(size_t j) {
    alignas(64) static constexpr auto kBase = [] {
      std::array<uint8_t, 64> base{};
      for (size_t q = 0; q < 8; ++q) {
        const uint8_t e = uint8_t(2 * q);
        const uint8_t bytes[4] = {e, uint8_t(64 + e), uint8_t(e + 1), uint8_t(64 + e + 1)};
        for (size_t k = 0; k < 8; ++k) base[8 * q + k] = k < 4 ? bytes[k] : e;
      }
      return base;
    }();
    return _mm512_add_epi8(_mm512_load_si512(kBase.data()), _mm512_set1_epi8(char(16 * j)));
  }
  static constexpr int64_t kSpread = 0x1916131009060300;  // element k: bits 3 k.. (+ 16)
};
#endif  // HWY_TARGET == HWY_AVX3_DL

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
