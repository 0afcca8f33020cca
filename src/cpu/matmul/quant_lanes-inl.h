// The rows-in-lanes layout for quantized weights: its packing and dot helpers and the Formats
// shared by several formats; the driver that runs them is quant_lanes_driver-inl.h, which the
// per-format TUs include (those whose row in the mat_mul table, matmul_table.h, names
// MatMulDriver::kRowsInLanes).
//
// Why a second driver beside quant_dot-inl.h's: that one dots one (row, token) pair per block,
// about seven vector ops for 32 products, most of them per-pair bookkeeping (int32 pair sums,
// conversion, scale, fma, then a horizontal sum at the end). Here a block of kG rows (16 on
// AVX-512, 8 on AVX2) is transposed so that each vector holds 4 consecutive elements of every row;
// a token then costs one broadcast of 4 activation bytes and one or two integer multiply-adds
// per 4 elements, plus a few float ops per block for all kG rows at once, and the weight
// unpacking is shared by all tokens of a tile.
//
// The math per (row, token) is the same on every path: the exact integer dot of each block
// (with the format's offsets or mins through the activation sums), converted to float and
// accumulated with fma in block order, then + bias. Prompts (each row group packed once per
// token chunk into an L1 scratch and reused by every tile) and single tokens (packed in
// registers, rows a stride apart) therefore give bit-identical results, whatever the batch,
// tile or row split.
//
// A Format provides WBlock and XBlock (the weight and activation blocks), Terms and
// ComputeTerms(x_block, terms) (per activation block values computed once per call and token
// chunk: its scale, sums), Packed and Pack(rows, offsets, b, packed) (block b of kLaneRows rows,
// transposed, with its scales as lanes), and Dot<T>(packed, x, terms, b, acc): acc[t] (lanes =
// rows) += the block's contribution for T tokens. Lanes32Format below provides all but the
// integer dot for the 32-element formats against Q8_0. A Format whose packed block would not fit
// in registers may also provide PackDot<kDotQuads>(rows, offsets, x, terms, b, acc): Pack then
// Dot<1>'s exact integers for a single token, unpacking as it dots instead of spilling Packed.

#if defined(PETREL_CPU_QUANT_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PETREL_CPU_QUANT_LANES_INL_H_
#undef PETREL_CPU_QUANT_LANES_INL_H_
#else
#define PETREL_CPU_QUANT_LANES_INL_H_
#endif

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/matmul/quant_dot-inl.h"
#include "cpu/simd/simd-inl.h"  // Scratch, GrowScratch
#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"  // Prefetch
#include "hwy/highway.h"
#include "quant/blocks.h"

// Single tokens on AVX-512 run this TU's AVX2 code: 8-row groups (8 row streams per thread)
// against the 16 of the 512-bit shape, which measured slower for decode (docs/PERFORMANCE.md)
// while prompts gain from it. AVX2, AVX3 and AVX3_DL give the same bits, so a token's result
// is still the same alone or batched. Needs AVX2 compiled before this target: not when AVX2 is
// the static target, which Highway compiles last.
//
// AVX3_DL's hop goes to a second instantiation of that AVX2 code whose u8 x i8 step is 256-bit
// EVEX vpdpbusd (AVX512-VNNI with VL, which AVX3_DL guarantees) instead of vpmaddubsw + vpmaddwd:
// the same 8-row shape with fewer instructions per 4 elements (MatMul<name>DotQuadsT), for the
// Formats whose kSingleTokenDotQuads says it measured faster. Only where AVX3_DL is compiled
// (the integer kernels' library) is that instantiation made. Formats whose
// kSingleTokenFullWidth is set (SingleTokenFullWidth) do not hop on AVX3_DL.
#undef PETREL_LANES_SINGLE_TOKEN_HOP
#undef PETREL_LANES_SINGLE_TOKEN_DOT_QUADS
#undef PETREL_LANES_SINGLE_TOKEN_FULL_WIDTH
#undef PETREL_LANES_EVEX_DOT_QUADS
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2 && (HWY_TARGETS & HWY_AVX3_DL)
#define PETREL_LANES_EVEX_DOT_QUADS 1
#else
#define PETREL_LANES_EVEX_DOT_QUADS 0
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 && (HWY_TARGETS & HWY_AVX2) && \
    HWY_STATIC_TARGET != HWY_AVX2
#if HWY_TARGET == HWY_AVX3_DL
#define PETREL_LANES_SINGLE_TOKEN_DOT_QUADS Format::kSingleTokenDotQuads
#define PETREL_LANES_SINGLE_TOKEN_FULL_WIDTH SingleTokenFullWidth<Format>::value
#else
#define PETREL_LANES_SINGLE_TOKEN_DOT_QUADS false
#define PETREL_LANES_SINGLE_TOKEN_FULL_WIDTH false
#endif
#define PETREL_LANES_SINGLE_TOKEN_HOP(name)                                                     \
  if (n_tokens == 1 && !PETREL_LANES_SINGLE_TOKEN_FULL_WIDTH) {                                 \
    if constexpr (PETREL_LANES_SINGLE_TOKEN_DOT_QUADS) {                                        \
      return ::petrel::cpu::N_AVX2::MatMul##name##DotQuadsT(w, w_row_bytes, n_in, xq,           \
                                                            xq_row_bytes, n_tokens, bias, out,  \
                                                            out_stride, row_begin, row_end);    \
    } else {                                                                                    \
      return ::petrel::cpu::N_AVX2::MatMul##name##T(w, w_row_bytes, n_in, xq, xq_row_bytes,     \
                                                    n_tokens, bias, out, out_stride, row_begin, \
                                                    row_end);                                   \
    }                                                                                           \
  }
#else
#define PETREL_LANES_SINGLE_TOKEN_HOP(name)
#endif

// On the AVX2 target of the integer kernels' library: MatMul<name>DotQuadsT, the single-token
// entry AVX3_DL's hop calls (the rows-in-lanes driver with the 256-bit EVEX dot step).
#undef PETREL_LANES_DOT_QUADS_TARGET
#if PETREL_LANES_EVEX_DOT_QUADS
#define PETREL_LANES_DOT_QUADS_TARGET(name)                                                       \
  void MatMul##name##DotQuadsT(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,    \
                               size_t xq_row_bytes, size_t n_tokens, const float* bias,           \
                               float* out, size_t out_stride, size_t row_begin, size_t row_end) { \
    LaneMatMulImpl<Format, true>(w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out,     \
                                 out_stride, row_begin, row_end);                                 \
  }
#else
#define PETREL_LANES_DOT_QUADS_TARGET(name)
#endif

// Inside HWY_NAMESPACE: MatMul<name>T of a rows-in-lanes format (PETREL_QUANT_MATMUL_TARGET
// with LaneMatMulImpl, and the single-token hop above).
#ifndef PETREL_LANES_MATMUL_TARGET
#define PETREL_LANES_MATMUL_TARGET(name)                                                        \
  static_assert(Format::kType == DType::k##name, "MatMul" #name "T: a Format of another type"); \
  void MatMul##name##T(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,          \
                       size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,     \
                       size_t out_stride, size_t row_begin, size_t row_end) {                   \
    PETREL_LANES_SINGLE_TOKEN_HOP(name)                                                         \
    LaneMatMulImpl<Format>(w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out,         \
                           out_stride, row_begin, row_end);                                     \
  }                                                                                             \
  PETREL_LANES_DOT_QUADS_TARGET(name)
#endif

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {

// A Format's optional kSingleTokenFullWidth: single tokens on AVX3_DL stay on its 512-bit code
// (16-row groups) instead of hopping to the AVX2 code (PETREL_LANES_SINGLE_TOKEN_HOP).
template <class F, class = void>
struct SingleTokenFullWidth : std::false_type {};
template <class F>
struct SingleTokenFullWidth<F, std::void_t<decltype(F::kSingleTokenFullWidth)>>
    : std::bool_constant<F::kSingleTokenFullWidth> {};

#if PETREL_QUANT_SIMD
// The lanes driver's vectors: full 512-bit ones on AVX-512 (16 rows per group, twice the work
// per instruction and the 32 registers to hold it), else quant_dot-inl.h's 256-bit (AVX2: 8
// rows) or 128-bit ones (4 rows). The activation blocks' own sums (ComputeTerms) keep QDI8.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
using LDI8 = hn::Full512<int8_t>;
#else
using LDI8 = QDI8;
#endif
using LDU8 = hn::Repartition<uint8_t, LDI8>;
using LDI16 = hn::Repartition<int16_t, LDI8>;
using LDI32 = hn::Repartition<int32_t, LDI8>;
using LDF = hn::Repartition<float, LDI8>;
using LDU32 = hn::Repartition<uint32_t, LDU8>;
using LDU64 = hn::Repartition<uint64_t, LDU8>;
using QVU8Full = hn::Vec<LDU8>;

// Rows per group: 16 (512-bit), 8 (256-bit) or 4; host_work_split.h's kQuantRowGrain is a multiple.
constexpr size_t kLaneRows = hn::MaxLanes(LDI32());

// Tokens per tile: the per-token accumulators plus the weight vectors and temporaries must stay
// in registers (16 vector registers before AVX-512, 32 with it). Measured: 4 is as fast as 6 or
// 8 with AVX-512's registers, and the same on every target keeps one code shape.
constexpr size_t kLaneTileTokens = 4;

// 16 bytes at src[l + 4j] in 128-bit block j of a vector of d (a full one, or halves combined).
template <class D>
HWY_INLINE hn::Vec<D> LoadRowBlocks(D d, const uint8_t* const* HWY_RESTRICT src, size_t l) {
  if constexpr (hn::MaxLanes(D()) <= 16) {
    return hn::LoadU(d, src[l]);
  } else {
    const hn::Half<D> dh;
    constexpr size_t kHalfBlocks = hn::MaxLanes(D()) / 32;
    return hn::Combine(d, LoadRowBlocks(dh, src, l + 4 * kHalfBlocks), LoadRowBlocks(dh, src, l));
  }
}

// Transposes 16 bytes at each of the kLaneRows pointers: lane l of p[s] = bytes 4s..4s+3 of
// src[l].
HWY_INLINE void TransposeWords(const uint8_t* const* HWY_RESTRICT src, QVU8Full (&p)[4]) {
  const LDU8 du8;
  const LDU32 du32;
  const LDU64 du64;
  hn::Vec<LDU32> a[4];
  for (size_t l = 0; l < 4; ++l) a[l] = hn::BitCast(du32, LoadRowBlocks(du8, src, l));
  // The 4 x 4 transpose of 32-bit words within each 128-bit half.
  const auto t0 = hn::BitCast(du64, hn::InterleaveLower(du32, a[0], a[1]));
  const auto t1 = hn::BitCast(du64, hn::InterleaveUpper(du32, a[0], a[1]));
  const auto t2 = hn::BitCast(du64, hn::InterleaveLower(du32, a[2], a[3]));
  const auto t3 = hn::BitCast(du64, hn::InterleaveUpper(du32, a[2], a[3]));
  p[0] = hn::BitCast(du8, hn::InterleaveLower(du64, t0, t2));
  p[1] = hn::BitCast(du8, hn::InterleaveUpper(du64, t0, t2));
  p[2] = hn::BitCast(du8, hn::InterleaveLower(du64, t1, t3));
  p[3] = hn::BitCast(du8, hn::InterleaveUpper(du64, t1, t3));
}

// Byte-shuffle indices (for TableLookupBytesOr0) that make int16 pair lanes of bytes a and b of
// each 32-bit lane i of a 128-bit block: [4i + a, 0, 4i + b, 0] (zero-extended), or with kHigh
// [0, 4i + a, 0, 4i + b] (in the high halves, for an arithmetic shift to sign-extend).
template <int a, int b, bool kHigh = false>
struct PairIndexTable {
  static constexpr std::array<uint8_t, 16> Make() {
    std::array<uint8_t, 16> index{};
    for (int i = 0; i < 4; ++i) {
      index[4 * i + (kHigh ? 1 : 0)] = uint8_t(4 * i + a);
      index[4 * i + (kHigh ? 0 : 1)] = 0x80;
      index[4 * i + (kHigh ? 3 : 2)] = uint8_t(4 * i + b);
      index[4 * i + (kHigh ? 2 : 3)] = 0x80;
    }
    return index;
  }
  alignas(16) static constexpr std::array<uint8_t, 16> kIndex = Make();
};

template <int a, int b, bool kHigh = false>
HWY_INLINE QVU8Full PairIndex() {
  return hn::LoadDup128(LDU8(), PairIndexTable<a, b, kHigh>::kIndex.data());
}

// Where the kLaneRows rows of a group start, as byte offsets from the first (for gathers).
struct LaneRowOffsets {
  hn::Vec<LDI32> bytes;
  bool gatherable;  // every offset fits int32
};

template <class WBlock>
HWY_INLINE LaneRowOffsets RowOffsets(const WBlock* const* HWY_RESTRICT rows) {
  HWY_ALIGN int32_t offsets[kLaneRows];
  bool fits = true;
  for (size_t l = 0; l < kLaneRows; ++l) {
    const ptrdiff_t diff =
        reinterpret_cast<const uint8_t*>(rows[l]) - reinterpret_cast<const uint8_t*>(rows[0]);
    fits = fits && diff >= INT32_MIN && diff <= INT32_MAX;
    offsets[l] = fits ? int32_t(diff) : 0;
  }
  return {hn::Load(LDI32(), offsets), fits};
}

// The 32-bit word at byte kByte of block b of each row, as lanes: one gather rather than
// kLaneRows scalar loads and a store-to-load round trip (measured: a third of the single-token
// time when it was done for the scales that way).
template <size_t kByte, class WBlock>
HWY_INLINE hn::Vec<LDU32> GatherBlockWords(const WBlock* const* HWY_RESTRICT rows,
                                           const LaneRowOffsets& offsets, size_t b) {
  const LDU32 du32;
  if (offsets.gatherable) {
    const auto* base =
        reinterpret_cast<const int32_t*>(reinterpret_cast<const uint8_t*>(rows[0] + b) + kByte);
    return hn::BitCast(du32, hn::GatherOffset(LDI32(), base, offsets.bytes));
  }
  HWY_ALIGN uint32_t words[kLaneRows];
  for (size_t l = 0; l < kLaneRows; ++l) {
    std::memcpy(&words[l], reinterpret_cast<const uint8_t*>(rows[l] + b) + kByte, 4);
  }
  return hn::Load(du32, words);
}

// The 16 bytes at `offset` in block b of each row, transposed (lane l of words[i] = bytes
// offset + 4i..offset + 4i + 3 of row l's block). At offset 0 these are the block heads where the
// K-quants and IQ4_XS keep d and their scales: one transpose instead of a gather per word (the
// gathers were about a third of Q4_K's single-token samples on Zen 5).
template <class WBlock>
HWY_INLINE void TransposeBlockBytes(const WBlock* const* HWY_RESTRICT rows, size_t b,
                                    size_t offset, QVU8Full (&words)[4]) {
  const uint8_t* src[kLaneRows];
  for (size_t l = 0; l < kLaneRows; ++l) {
    src[l] = reinterpret_cast<const uint8_t*>(rows[l] + b) + offset;
  }
  TransposeWords(src, words);
}

#if HWY_TARGET == HWY_AVX3_DL
// The low halves of 32-bit lanes: Highway 1.0.3's TruncateTo on AVX3_DL passes vpermb its
// table as the indices (wrong results); vpmovdw is what AVX3's TruncateTo uses.
HWY_INLINE hn::Vec128<uint16_t> TruncateTo16(hn::Vec256<uint32_t> v) {
  return hn::Vec128<uint16_t>{_mm256_cvtepi32_epi16(v.raw)};
}
HWY_INLINE hn::Vec256<uint16_t> TruncateTo16(hn::Vec512<uint32_t> v) {
  return hn::Vec256<uint16_t>{_mm512_cvtepi32_epi16(v.raw)};
}
#endif

// The f16 in the low (kUpper false) or high half of each 32-bit lane, as f32.
template <bool kUpper>
HWY_INLINE hn::Vec<LDF> HalvesToF32(hn::Vec<LDU32> words) {
  const LDF df;
  const hn::Rebind<uint16_t, LDF> du16;
  const hn::Rebind<hwy::float16_t, LDF> df16;
  const auto halves = kUpper ? hn::ShiftRight<16>(words) : words;
#if HWY_TARGET == HWY_AVX3_DL
  (void)du16;
  return hn::PromoteTo(df, hn::BitCast(df16, TruncateTo16(halves)));
#else
  return hn::PromoteTo(df, hn::BitCast(df16, hn::TruncateTo(du16, halves)));
#endif
}

#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3_DL)
// The f16 at address_of(l) for l = 0..7, as 8 f32: the halves inserted one by one, then widened.
template <class AddressOf>
HWY_INLINE __m256 InsertHalvesToF32(const AddressOf& address_of) {
  auto half = [&](size_t l) {
    uint16_t v;
    std::memcpy(&v, address_of(l), 2);
    return int(v);
  };
  __m128i h = _mm_cvtsi32_si128(half(0));
  h = _mm_insert_epi16(h, half(1), 1);
  h = _mm_insert_epi16(h, half(2), 2);
  h = _mm_insert_epi16(h, half(3), 3);
  h = _mm_insert_epi16(h, half(4), 4);
  h = _mm_insert_epi16(h, half(5), 5);
  h = _mm_insert_epi16(h, half(6), 6);
  h = _mm_insert_epi16(h, half(7), 7);
  return _mm256_cvtph_ps(h);
}

// The byte at address_of(l) for l = 0..7, zero-extended to 8 int32: inserted one by one, then
// widened, rather than gathered.
template <class AddressOf>
HWY_INLINE __m256i InsertBytesToI32(const AddressOf& address_of) {
  __m128i bytes = _mm_cvtsi32_si128(*address_of(0));
  bytes = _mm_insert_epi8(bytes, *address_of(1), 1);
  bytes = _mm_insert_epi8(bytes, *address_of(2), 2);
  bytes = _mm_insert_epi8(bytes, *address_of(3), 3);
  bytes = _mm_insert_epi8(bytes, *address_of(4), 4);
  bytes = _mm_insert_epi8(bytes, *address_of(5), 5);
  bytes = _mm_insert_epi8(bytes, *address_of(6), 6);
  bytes = _mm_insert_epi8(bytes, *address_of(7), 7);
  return _mm256_cvtepu8_epi32(bytes);
}
#endif

// The f16 scales `d` (a block's first two bytes) of block b of each row, as f32 lanes.
template <class WBlock>
HWY_INLINE hn::Vec<LDF> LaneScales(const WBlock* const* HWY_RESTRICT rows,
                                   const LaneRowOffsets& offsets, size_t b) {
  static_assert(offsetof(WBlock, d) == 0, "the scale starts the block");
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  if constexpr (kLaneRows == 8) {
    // As GatherBlockWords, but the halves themselves inserted: no truncation of words.
    return hn::Vec<LDF>{InsertHalvesToF32([&](size_t l) { return &rows[l][b].d; })};
  }
#endif
  return HalvesToF32<false>(GatherBlockWords<0>(rows, offsets, b));
}

// The 4 bytes at p in every 32-bit lane.
HWY_INLINE hn::Vec<LDI8> BroadcastQuad(const int8_t* HWY_RESTRICT p) {
  uint32_t word;
  std::memcpy(&word, p, sizeof(word));
  return hn::BitCast(LDI8(), hn::Set(LDU32(), word));
}

// DotQuadsAdd where kDotQuads is this target's kHasDotQuads; on the AVX2 target of the integer
// kernels' library kDotQuads may also be true (MatMul<name>DotQuadsT, run only where AVX3_DL
// is): vpdpbusd on 256-bit vectors in its EVEX encoding, as quant_dot-inl.h spells it for
// AVX3_DL. Both compute the same exact int32 lanes.
template <bool kDotQuads, class VI32, class VU8, class VI8>
HWY_INLINE VI32 DotQuads(VI32 sum, VU8 a, VI8 b) {
#if PETREL_LANES_EVEX_DOT_QUADS
  if constexpr (kDotQuads && !kHasDotQuads) {
    __m256i acc = sum.raw;
    asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a.raw), "v"(b.raw));
    return VI32{acc};
  } else
#endif
  {
    static_assert(kDotQuads == kHasDotQuads, "no vpdpbusd on this target");
    return DotQuadsAdd(sum, a, b);
  }
}

// One token's results: out[row_of(l)] = acc lane l + bias, for the first n lanes.
template <class VF, class RowOf>
HWY_INLINE void StoreLaneRows(VF acc, size_t n, const RowOf& row_of,
                              const float* HWY_RESTRICT bias, float* HWY_RESTRICT out) {
  const hn::DFromV<VF> df;
  HWY_ALIGN float lanes[hn::MaxLanes(df)];
  hn::Store(acc, df, lanes);
  for (size_t l = 0; l < n; ++l) {
    const size_t row = row_of(l);
    out[row] = lanes[l] + (bias ? bias[row] : 0.0f);
  }
}

// The 16 nibble bytes of block b of each row, transposed (lane l of p[s] = bytes 4s..4s+3 of row
// l): low nibbles are element group s, high nibbles group s + 4 (Q4_0's layout, also Q4_1's and
// IQ4_NL's).
template <class WBlock>
HWY_INLINE void PackNibbles(const WBlock* const* HWY_RESTRICT rows, size_t b, QVU8Full (&p)[4]) {
  const uint8_t* src[kLaneRows];
  for (size_t l = 0; l < kLaneRows; ++l) src[l] = rows[l][b].qs;
  TransposeWords(src, p);
}

// A 16-entry grid of int8 levels as bytes (for LoadDup128: align the array to 16), each plus
// kOffset: 0 keeps the signed levels, a positive offset makes them unsigned for vpdpbusd.
template <int kOffset>
constexpr std::array<uint8_t, 16> GridBytes(const int8_t (&levels)[16]) {
  std::array<uint8_t, 16> grid{};
  for (size_t i = 0; i < 16; ++i) grid[i] = uint8_t(levels[i] + kOffset);
  return grid;
}

// The IQ4_NL/IQ4_XS grid.
alignas(16) inline constexpr std::array<uint8_t, 16> kIQ4Grid = GridBytes<0>(quant::kIQ4NLValues);

// 16 nibble bytes at each src[l] (low nibbles elements 0..15, high 16..31 of a 32-element
// block), transposed as PackNibbles and mapped through a 16-entry grid (the IQ4 one unless
// given; 16 aligned bytes) by one byte shuffle each: p[g] holds signed levels of element group g.
HWY_INLINE void PackGridNibbles(const uint8_t* const* HWY_RESTRICT src, QVU8Full (&p)[8],
                                const uint8_t* HWY_RESTRICT grid16 = kIQ4Grid.data()) {
  const LDU8 du8;
  const hn::Repartition<uint16_t, LDU8> du16;
  QVU8Full nibbles[4];
  TransposeWords(src, nibbles);
  const auto mask = hn::Set(du8, 0x0F);
  const auto grid = hn::LoadDup128(du8, grid16);
  for (size_t s = 0; s < 4; ++s) {
    const auto lo = hn::And(nibbles[s], mask);
    const auto hi = hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, nibbles[s]))), mask);
    p[s] = hn::TableLookupBytes(grid, lo);
    p[s + 4] = hn::TableLookupBytes(grid, hi);
  }
}

// isum[t] (lanes = rows) = sum of nibble levels (0..15) packed by PackNibbles times token t's
// int8 activations. The 16-bit pair sums of the 8 groups are added before widening: a pair is at
// most 2 x 15 x 127 and a lane adds 8 pairs (30480 < 32767), so one maddubs and one 16-bit add
// per 4 elements and token. With vpdpbusd (kHasDotQuads): one instruction per 4 elements and
// token, in two chains (low and high nibbles) so that a single token's sums do not wait on one
// 8-deep chain of the instruction's latency.
template <size_t T, bool kDotQuads = kHasDotQuads, class XBlock>
HWY_INLINE void DotNibbles(const QVU8Full (&p)[4], const XBlock* const* HWY_RESTRICT x, size_t b,
                           hn::Vec<LDI32> (&isum)[T]) {
  const LDU8 du8;
  const hn::Repartition<uint16_t, LDU8> du16;
  const auto mask = hn::Set(du8, 0x0F);
  if constexpr (kDotQuads) {
    hn::Vec<LDI32> hi_sum[T];
    for (size_t t = 0; t < T; ++t) isum[t] = hi_sum[t] = hn::Zero(LDI32());
    for (size_t s = 0; s < 4; ++s) {
      const auto lo = hn::And(p[s], mask);
      const auto hi = hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, p[s]))), mask);
      for (size_t t = 0; t < T; ++t) {
        isum[t] = DotQuads<kDotQuads>(isum[t], lo, BroadcastQuad(x[t][b].qs + 4 * s));
        hi_sum[t] = DotQuads<kDotQuads>(hi_sum[t], hi, BroadcastQuad(x[t][b].qs + 4 * (s + 4)));
      }
    }
    for (size_t t = 0; t < T; ++t) isum[t] = hn::Add(isum[t], hi_sum[t]);
    return;
  }
  hn::Vec<LDI16> sum16[T];
  for (size_t s = 0; s < 4; ++s) {
    const auto lo = hn::And(p[s], mask);
    const auto hi = hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, p[s]))), mask);
    for (size_t t = 0; t < T; ++t) {
      const auto prod = hn::Add(MulPairsU8I8(lo, BroadcastQuad(x[t][b].qs + 4 * s)),
                                MulPairsU8I8(hi, BroadcastQuad(x[t][b].qs + 4 * (s + 4))));
      sum16[t] = s == 0 ? prod : hn::Add(sum16[t], prod);
    }
  }
  const auto ones = hn::Set(LDI16(), 1);
  for (size_t t = 0; t < T; ++t) isum[t] = MulPairsI16(sum16[t], ones);
}

// isum[t] (lanes = rows) = sum over the kGroups packed groups of signed weight bytes times token
// t's signed activation bytes: the sign trick (|w| times x with w's sign) and a widening to int32
// per group, since two pairs of 127 x 127 products would not fit 16 bits. For the formats whose
// packed blocks hold signed int8 levels (Q8_0, and IQ4_NL's and IQ4_XS's grid values); the
// activations start x_offset bytes into the block's quants (a sub-block of a super-block).
template <size_t kGroups, size_t T, bool kDotQuads = kHasDotQuads, class XBlock>
HWY_INLINE void DotSignedGroups(const QVU8Full (&p)[kGroups], const XBlock* const* HWY_RESTRICT x,
                                size_t b, hn::Vec<LDI32> (&isum)[T], size_t x_offset = 0) {
  const LDI8 d8;
  const LDU8 du8;
  const auto ones = hn::Set(LDI16(), 1);
  if constexpr (kDotQuads) {
    // Even and odd groups in two chains of vpdpbusd (see DotNibbles).
    hn::Vec<LDI32> odd_sum[T];
    for (size_t t = 0; t < T; ++t) isum[t] = odd_sum[t] = hn::Zero(LDI32());
    for (size_t g = 0; g < kGroups; ++g) {
      const auto w = hn::BitCast(d8, p[g]);
      const auto w_abs = hn::BitCast(du8, hn::Abs(w));
      for (size_t t = 0; t < T; ++t) {
        auto& sum = g % 2 == 0 ? isum[t] : odd_sum[t];
        sum = DotQuads<kDotQuads>(sum, w_abs,
                                  ApplySign(BroadcastQuad(x[t][b].qs + x_offset + 4 * g), w));
      }
    }
    for (size_t t = 0; t < T; ++t) isum[t] = hn::Add(isum[t], odd_sum[t]);
    return;
  }
  for (size_t g = 0; g < kGroups; ++g) {
    const auto w = hn::BitCast(d8, p[g]);
    const auto w_abs = hn::BitCast(du8, hn::Abs(w));
    for (size_t t = 0; t < T; ++t) {
      const auto prod =
          MulPairsI16(MulPairsU8I8(w_abs, ApplySign(BroadcastQuad(x[t][b].qs + x_offset + 4 * g), w)),
                      ones);
      isum[t] = g == 0 ? prod : hn::Add(isum[t], prod);
    }
  }
}

// Byte tables for FifthBitLevels: kIndex<g> copies byte g / 2 of each 32-bit lane into all four
// of its bytes; kBits<g> selects bit 4 (g % 2) + k in byte k.
template <size_t g>
struct FifthBitTables {
  static constexpr std::array<uint8_t, 16> MakeIndex() {
    std::array<uint8_t, 16> index{};
    for (size_t i = 0; i < 16; ++i) index[i] = uint8_t(i / 4 * 4 + g / 2);
    return index;
  }
  static constexpr std::array<uint8_t, 16> MakeBits() {
    std::array<uint8_t, 16> bits{};
    for (size_t i = 0; i < 16; ++i) bits[i] = uint8_t(1u << (4 * (g % 2) + i % 4));
    return bits;
  }
  alignas(16) static constexpr std::array<uint8_t, 16> kIndex = MakeIndex();
  alignas(16) static constexpr std::array<uint8_t, 16> kBits = MakeBits();
};

// The 5-bit levels (0..31) of Q5_0/Q5_1 blocks in the transposed layout: group g (elements
// 4g..4g+3, lane l = row l) is the nibble PackNibbles put there plus 16 where bit 4g + k of the
// row's qh word (a lane of `qh`) is set. Per group one byte shuffle spreads the qh byte over
// the four elements, and a mask and compare turn each element's bit into 16.
HWY_INLINE void FifthBitLevels(const QVU8Full (&nibbles)[4], hn::Vec<LDU32> qh,
                               QVU8Full (&levels)[8]) {
  const LDU8 du8;
  const hn::Repartition<uint16_t, LDU8> du16;
  const auto qh8 = hn::BitCast(du8, qh);
  const auto mask = hn::Set(du8, 0x0F);
  const auto sixteen = hn::Set(du8, 0x10);
  auto fifth = [&](auto group) {
    constexpr size_t g = decltype(group)::value;
    const auto spread = hn::TableLookupBytes(qh8, hn::LoadDup128(du8, FifthBitTables<g>::kIndex.data()));
    const auto bits = hn::LoadDup128(du8, FifthBitTables<g>::kBits.data());
    return hn::And(hn::VecFromMask(du8, hn::Eq(hn::And(spread, bits), bits)), sixteen);
  };
  auto low = [&](size_t s) { return hn::And(nibbles[s], mask); };
  auto high = [&](size_t s) {
    return hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, nibbles[s]))), mask);
  };
  levels[0] = hn::Or(low(0), fifth(std::integral_constant<size_t, 0>()));
  levels[1] = hn::Or(low(1), fifth(std::integral_constant<size_t, 1>()));
  levels[2] = hn::Or(low(2), fifth(std::integral_constant<size_t, 2>()));
  levels[3] = hn::Or(low(3), fifth(std::integral_constant<size_t, 3>()));
  levels[4] = hn::Or(high(0), fifth(std::integral_constant<size_t, 4>()));
  levels[5] = hn::Or(high(1), fifth(std::integral_constant<size_t, 5>()));
  levels[6] = hn::Or(high(2), fifth(std::integral_constant<size_t, 6>()));
  levels[7] = hn::Or(high(3), fifth(std::integral_constant<size_t, 7>()));
}

// Block b of each Q5_0/Q5_1 row as transposed levels 0..31: the nibbles, and the qh words of
// the kLaneRows rows by one gather.
template <class WBlock>
HWY_INLINE void PackFiveBitLevels(const WBlock* const* HWY_RESTRICT rows,
                                  const LaneRowOffsets& offsets, size_t b, QVU8Full (&levels)[8]) {
  QVU8Full nibbles[4];
  PackNibbles(rows, b, nibbles);
  FifthBitLevels(nibbles, GatherBlockWords<offsetof(WBlock, qh)>(rows, offsets, b), levels);
}

// isum[t] (lanes = rows) = sum over 8 packed groups of unsigned levels 0..31 times token t's
// int8 activations. A maddubs pair is at most 2 x 31 x 128 = 7936, so four groups add in 16 bits
// (31744 < 32767) before each half widens to int32.
template <size_t T, bool kDotQuads = kHasDotQuads, class XBlock>
HWY_INLINE void DotFiveBitLevels(const QVU8Full (&p)[8], const XBlock* const* HWY_RESTRICT x,
                                 size_t b, hn::Vec<LDI32> (&isum)[T]) {
  if constexpr (kDotQuads) {
    // The two halves in two chains of vpdpbusd (see DotNibbles).
    hn::Vec<LDI32> high_sum[T];
    for (size_t t = 0; t < T; ++t) isum[t] = high_sum[t] = hn::Zero(LDI32());
    for (size_t s = 0; s < 4; ++s) {
      for (size_t t = 0; t < T; ++t) {
        isum[t] = DotQuads<kDotQuads>(isum[t], p[s], BroadcastQuad(x[t][b].qs + 4 * s));
        high_sum[t] =
            DotQuads<kDotQuads>(high_sum[t], p[s + 4], BroadcastQuad(x[t][b].qs + 4 * (s + 4)));
      }
    }
    for (size_t t = 0; t < T; ++t) isum[t] = hn::Add(isum[t], high_sum[t]);
    return;
  }
  const auto ones = hn::Set(LDI16(), 1);
  for (size_t half = 0; half < 2; ++half) {
    hn::Vec<LDI16> sum16[T];
    for (size_t s = 0; s < 4; ++s) {
      const size_t g = 4 * half + s;
      for (size_t t = 0; t < T; ++t) {
        const auto prod = MulPairsU8I8(p[g], BroadcastQuad(x[t][b].qs + 4 * g));
        sum16[t] = s == 0 ? prod : hn::Add(sum16[t], prod);
      }
    }
    for (size_t t = 0; t < T; ++t) {
      const auto wide = MulPairsI16(sum16[t], ones);
      isum[t] = half == 0 ? wide : hn::Add(isum[t], wide);
    }
  }
}

// PackQuants and DotInt of the 4-bit linear formats (Q4_0, Q4_1), a base of their Format.
template <class WBlock>
struct NibbleQuants {
  static HWY_INLINE void PackQuants(const WBlock* const* HWY_RESTRICT rows,
                                    const LaneRowOffsets& /*offsets*/, size_t b,
                                    QVU8Full (&p)[4]) {
    PackNibbles(rows, b, p);
  }

  template <size_t T, bool kDotQuads = kHasDotQuads, class XBlock>
  static HWY_INLINE void DotInt(const QVU8Full (&p)[4], const XBlock* const* HWY_RESTRICT x,
                                size_t b, hn::Vec<LDI32> (&isum)[T]) {
    DotNibbles<T, kDotQuads>(p, x, b, isum);
  }
};

// PackQuants and DotInt of the 5-bit formats (Q5_0, Q5_1), a base of their Format.
template <class WBlock>
struct FiveBitQuants {
  static HWY_INLINE void PackQuants(const WBlock* const* HWY_RESTRICT rows,
                                    const LaneRowOffsets& offsets, size_t b, QVU8Full (&p)[8]) {
    PackFiveBitLevels(rows, offsets, b, p);
  }

  template <size_t T, bool kDotQuads = kHasDotQuads, class XBlock>
  static HWY_INLINE void DotInt(const QVU8Full (&p)[8], const XBlock* const* HWY_RESTRICT x,
                                size_t b, hn::Vec<LDI32> (&isum)[T]) {
    DotFiveBitLevels<T, kDotQuads>(p, x, b, isum);
  }
};

// ---------------------------------------------------------------------------------------------
// 32-element formats against Q8_0 (Q4_0, Q8_0, IQ4_NL, Q5_0). Sub provides
// PackQuants(rows, offsets, b, q)
// (the transposed quants) and DotInt<T>(p, x, b, isum): the int32 lanes (one per row) of
// sum(level * x).

// Per (token, block) activation terms.
struct XTerms {
  float d;      // the block's scale
  int32_t sum;  // sum of its int8 values (for a format's level offset)
};

// The sum of a Q8_0 activation block's int8 values.
HWY_INLINE int32_t ActivationSum(const quant::BlockQ8_0& x) {
  const QDI8 d8;
  const QDI32 d32;
  const auto ones8 = hn::Set(QDU8(), 1);
  const auto ones16 = hn::Set(QDI16(), 1);
  constexpr size_t kLanes = hn::MaxLanes(d8);
  auto sum = hn::Zero(d32);
  for (size_t v = 0; v < kQVecs; ++v) {
    const auto xv = hn::LoadU(d8, x.qs + v * kLanes);
    sum = hn::Add(sum, MulPairsI16(MulPairsU8I8(ones8, xv), ones16));
  }
  return hn::GetLane(hn::SumOfLanes(d32, sum));
}

template <class Sub, size_t kPackedVecs, int kOffset>
struct Lanes32Format {
  using XBlock = quant::BlockQ8_0;
  using Terms = XTerms;
  static constexpr size_t kPacked = kPackedVecs;
  // Single tokens on AVX3_DL take the 256-bit vpdpbusd code (PETREL_LANES_SINGLE_TOKEN_HOP).
  static constexpr bool kSingleTokenDotQuads = true;
  struct Packed {
    // Defined here, inside the target region: GCC compiles the implicit constructor of a
    // struct of vectors without the target's options, and then cannot inline the vectors'
    // constructors into it on AArch64 NEON ("target specific option mismatch").
    HWY_INLINE Packed() {}
    QVU8Full q[kPacked];
    hn::Vec<LDF> d;
  };

  static HWY_INLINE void ComputeTerms(const XBlock& x, Terms& terms) {
    terms.d = HalfToF32(x.d);
    terms.sum = kOffset != 0 ? ActivationSum(x) : 0;
  }

  template <class WBlock>
  static HWY_INLINE void Pack(const WBlock* const* HWY_RESTRICT rows, const LaneRowOffsets& offsets,
                              size_t b, Packed& packed) {
    Sub::PackQuants(rows, offsets, b, packed.q);
    packed.d = LaneScales(rows, offsets, b);
  }

  template <size_t T, bool kDotQuads = kHasDotQuads>
  static HWY_INLINE void Dot(const Packed& packed, const XBlock* const* HWY_RESTRICT x,
                             const Terms* const* HWY_RESTRICT terms, size_t b,
                             hn::Vec<LDF> (&acc)[T]) {
    const LDI32 d32;
    const LDF df;
    hn::Vec<LDI32> isum[T];
    Sub::template DotInt<T, kDotQuads>(packed.q, x, b, isum);
    for (size_t t = 0; t < T; ++t) {
      const XTerms& xt = terms[t][b];
      if constexpr (kOffset != 0) isum[t] = hn::Sub(isum[t], hn::Set(d32, kOffset * xt.sum));
      acc[t] = hn::MulAdd(hn::ConvertTo(df, isum[t]), hn::Mul(packed.d, hn::Set(df, xt.d)), acc[t]);
    }
  }
};

// 32-element formats with a scale and a min per block, d q + m (Q4_1, Q5_1), against Q8_1. Sub
// provides PackQuants(rows, offsets, b, q) and DotInt<T>(p, x, b, isum) as above. One gather
// fetches d and m of the kLaneRows rows (the block's first word), and the min enters through
// the activation block's s = d_x sum(x): per block and token, acc = fma(isum, d_w d_x, acc) then
// fma(m_w, s_x, acc).
template <class Sub, size_t kPackedVecs>
struct LanesMinFormat {
  using XBlock = quant::BlockQ8_1;
  // Single tokens on AVX3_DL take the 256-bit vpdpbusd code (PETREL_LANES_SINGLE_TOKEN_HOP).
  static constexpr bool kSingleTokenDotQuads = true;
  struct Terms {
    float d;  // the activation block's scale
    float s;  // d * sum of its int8 values
  };
  static constexpr size_t kPacked = kPackedVecs;
  struct Packed {
    // Defined here, inside the target region: GCC compiles the implicit constructor of a
    // struct of vectors without the target's options, and then cannot inline the vectors'
    // constructors into it on AArch64 NEON ("target specific option mismatch").
    HWY_INLINE Packed() {}
    QVU8Full q[kPacked];
    hn::Vec<LDF> d, m;
  };

  static HWY_INLINE void ComputeTerms(const XBlock& x, Terms& terms) {
    terms.d = HalfToF32(x.d);
    terms.s = HalfToF32(x.s);
  }

  template <class WBlock>
  static HWY_INLINE void Pack(const WBlock* const* HWY_RESTRICT rows, const LaneRowOffsets& offsets,
                              size_t b, Packed& packed) {
    static_assert(offsetof(WBlock, d) == 0 && offsetof(WBlock, m) == 2, "d, m start the block");
    Sub::PackQuants(rows, offsets, b, packed.q);
    const auto words = GatherBlockWords<0>(rows, offsets, b);
    packed.d = HalvesToF32<false>(words);
    packed.m = HalvesToF32<true>(words);
  }

  template <size_t T, bool kDotQuads = kHasDotQuads>
  static HWY_INLINE void Dot(const Packed& packed, const XBlock* const* HWY_RESTRICT x,
                             const Terms* const* HWY_RESTRICT terms, size_t b,
                             hn::Vec<LDF> (&acc)[T]) {
    const LDF df;
    hn::Vec<LDI32> isum[T];
    Sub::template DotInt<T, kDotQuads>(packed.q, x, b, isum);
    for (size_t t = 0; t < T; ++t) {
      const Terms& xt = terms[t][b];
      acc[t] = hn::MulAdd(hn::ConvertTo(df, isum[t]), hn::Mul(packed.d, hn::Set(df, xt.d)), acc[t]);
      acc[t] = hn::MulAdd(packed.m, hn::Set(df, xt.s), acc[t]);
    }
  }
};
#endif  // PETREL_QUANT_SIMD

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
