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

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/matmul/quant_grid-inl.h"
#include "hwy/highway.h"
#include "quant/iq_grids.h"  // IQ2Signs

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {

// A codebook of up to 1024 entries as level numbers: entry i's element k has level
// levels[(code >> (bits k)) & (2^bits - 1)], its code's low byte code_low[i] and high byte
// code_high[i]; `signs` holds quant::IQ2Signs of every 7-bit sign group (a `vpermi2b` table).
struct GridCodeTables {
  alignas(64) uint8_t code_low[1024];
  alignas(64) uint8_t code_high[1024];
  alignas(64) uint8_t levels[64];  // level number n & (2^bits - 1) at byte n (a `vpermb` table)
  alignas(64) uint8_t signs[128];
};

// The tables of a codebook of `entries` entries of `entry_bytes` unsigned bytes (little-endian in
// `grid`), whose distinct byte values number at most 2^bits and whose code fits 16 bits.
inline GridCodeTables MakeGridCodeTables(const uint8_t* grid, size_t entries, size_t entry_bytes,
                                         size_t bits) {
  GridCodeTables tables{};
  std::vector<uint8_t> distinct;
  for (size_t i = 0; i < entries * entry_bytes; ++i) {
    if (std::find(distinct.begin(), distinct.end(), grid[i]) == distinct.end()) {
      distinct.push_back(grid[i]);
    }
  }
  std::sort(distinct.begin(), distinct.end());
  const size_t level_mask = (size_t{1} << bits) - 1;
  if (distinct.size() > level_mask + 1 || entry_bytes * bits > 16 || entries > 1024) {
    return tables;  // never: the grids are fixed (and all-zero tables fail every parity test)
  }
  for (size_t n = 0; n < 64; ++n) {
    tables.levels[n] = (n & level_mask) < distinct.size() ? distinct[n & level_mask] : 0;
  }
  for (size_t i = 0; i < entries; ++i) {
    uint32_t code = 0;
    for (size_t k = 0; k < entry_bytes; ++k) {
      const auto level = std::find(distinct.begin(), distinct.end(), grid[i * entry_bytes + k]);
      code |= uint32_t(level - distinct.begin()) << (bits * k);
    }
    tables.code_low[i] = uint8_t(code);
    tables.code_high[i] = uint8_t(code >> 8);
  }
  for (uint32_t i = 0; i < 128; ++i) tables.signs[i] = quant::IQ2Signs(i);
  return tables;
}

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

// Eight int16 scales s as sixteen 2 s + 1, each twice: word n of the result is the integer
// scale of elements 16 n..16 n+15 where s[c] is that of chunk c.
HWY_INLINE __m256i OddScalesTwice(__m128i s) {
  const __m128i odd =
      _mm_add_epi16(_mm_add_epi16(s, s), _mm_set1_epi16(1));
  return _mm256_set_m128i(_mm_unpackhi_epi16(odd, odd), _mm_unpacklo_epi16(odd, odd));
}
// Sixteen int16 scales s (one per 16 elements) as 2 s + 1.
HWY_INLINE __m256i OddScales16(__m128i low, __m128i high) {
  const __m256i s = _mm256_set_m128i(high, low);
  return _mm256_add_epi16(_mm256_add_epi16(s, s), _mm256_set1_epi16(1));
}

// One super-block's codes, signs and scales, as GridVbmiStep reads them: `low` and `high` hold
// the code bytes of the entries where the Layout's CodeIndex finds them; `signs` (sign bytes
// found by the Layout) or `sign_bits` (one bit per element, in element order) the signs; word n
// of `scales` the integer scale of elements 16 n..16 n+15.
struct GridVbmiBlock {
  __m512i low, high, signs;
  const uint8_t* sign_bits;
  __m256i scales;
};

// The mask of the negative elements of 64 j..64 j+63 from their bits in element order.
HWY_INLINE __mmask64 NegativeFromBits(const GridVbmiBlock& block, size_t j) {
  uint64_t bits;
  std::memcpy(&bits, block.sign_bits + 8 * j, sizeof(bits));
  return _cvtu64_mask64(bits);
}
// The same from sign bytes: byte `SignIndex` of `signs` for qword q (elements 8 q..8 q+7),
// its bits tested one per byte.
template <class Layout>
HWY_INLINE __mmask64 NegativeFromBytes(const GridVbmiBlock& block, size_t j) {
  const __m512i sign_bytes = _mm512_permutexvar_epi8(Layout::SignIndex(j), block.signs);
  return _mm512_test_epi8_mask(sign_bytes, _mm512_set1_epi64(0x8040201008040201));
}

// Elements 64 j..64 j+63 (chunks 2 j and 2 j + 1): the magnitudes, and the mask of the negative
// ones. A Layout gives, for qword q of the vector (elements 8 q..8 q+7), the bytes of
// low:high that hold its codes (CodeIndex, a `vpermi2b` index), the multishift control that
// spreads its level numbers (kSpread), and Negative(block, j).
template <class Layout>
HWY_INLINE void GridVbmiStep(const GridVbmiBlock& block, const GridCodeTables& tables, size_t j,
                             __m512i& mags, __mmask64& negative) {
  const __m512i codes = _mm512_permutex2var_epi8(block.low, Layout::CodeIndex(j), block.high);
  const __m512i numbers = _mm512_multishift_epi64_epi8(_mm512_set1_epi64(Layout::kSpread), codes);
  mags = _mm512_permutexvar_epi8(numbers, _mm512_load_si512(tables.levels));
  negative = Layout::Negative(block, j);
}

// The int16 scale lanes of chunks 2 j, 2 j + 1: lane L is word 4 j + L / 8 of `scales`.
HWY_INLINE __m512i GridVbmiScales(const __m256i& scales, size_t j) {
  alignas(64) static constexpr auto kWords = [] {
    std::array<uint16_t, 32> words{};
    for (size_t lane = 0; lane < 32; ++lane) words[lane] = uint16_t(lane / 8);
    return words;
  }();
  const __m512i index =
      _mm512_add_epi16(_mm512_load_si512(kWords.data()), _mm512_set1_epi16(int16_t(4 * j)));
  return _mm512_permutexvar_epi16(index, _mm512_castsi256_si512(scales));
}

// DotGridK's int32 lanes for one super-block.
template <class Layout>
HWY_INLINE QVI32 DotGridVbmi(const GridVbmiBlock& block, const GridCodeTables& tables,
                             const int8_t* HWY_RESTRICT x) {
  __m512i sum = _mm512_setzero_si512();
  for (size_t j = 0; j < 4; ++j) {
    __m512i mags;
    __mmask64 negative;
    GridVbmiStep<Layout>(block, tables, j, mags, negative);
    const __m512i xv = _mm512_loadu_si512(x + 64 * j);
    const __m512i signed_x = _mm512_mask_sub_epi8(xv, negative, _mm512_setzero_si512(), xv);
    const __m512i pairs = _mm512_maddubs_epi16(mags, signed_x);
    sum = _mm512_add_epi32(sum, _mm512_madd_epi16(pairs, GridVbmiScales(block.scales, j)));
  }
  return QVI32{_mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1))};
}

// DecodeGridK's levels and chunk scales for one super-block (w.d and w.dmin are the caller's).
template <class Layout>
HWY_INLINE void DecodeGridVbmi(const GridVbmiBlock& block, const GridCodeTables& tables,
                               DecodedK& w) {
  for (size_t j = 0; j < 4; ++j) {
    __m512i mags;
    __mmask64 negative;
    GridVbmiStep<Layout>(block, tables, j, mags, negative);
    _mm512_store_si512(w.q + 64 * j,
                       _mm512_mask_sub_epi8(mags, negative, _mm512_setzero_si512(), mags));
    _mm512_store_si512(w.scales[2 * j], GridVbmiScales(block.scales, j));
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
