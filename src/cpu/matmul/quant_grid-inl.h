// Decode helpers of the codebook and low-bit formats (IQ1_S..IQ3_S, TQ1_0, Q2_0) on the
// pair-per-block driver (quant_dot-inl.h): 32 elements built from 8-byte codebook rows in
// registers with their signs as +-1 bytes, the codebook formats' decode and single-token dot, and
// base-3 digits unpacked.
//
// The IQ2/IQ3 codebook rows hold unsigned magnitudes; after their sign bits they are signed int8
// levels, which DotK multiplies exactly (|level| <= 62). The IQ1 rows hold -1, 0, +1 and a
// per-group delta of +-1/8: eight times that, 8 g +- 1, is an integer level and the 1/8 goes
// into the super-block scale.

#if defined(PETREL_CPU_QUANT_GRID_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PETREL_CPU_QUANT_GRID_INL_H_
#undef PETREL_CPU_QUANT_GRID_INL_H_
#else
#define PETREL_CPU_QUANT_GRID_INL_H_
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/matmul/quant_dot-inl.h"
#include "hwy/highway.h"
#include "quant/iq_grids.h"  // IQ2Signs

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {

// Sign bytes as 8 bytes of +1 or -1 (-1 where bit j of the byte is set), for ApplySign: every
// byte value, and the 7-bit IQ2/IQ3 sign groups (the eighth bit from the parity).
constexpr uint64_t SignUnits(uint32_t bits) {
  uint64_t units = 0;
  for (uint32_t j = 0; j < 8; ++j) units |= uint64_t((bits >> j) & 1 ? 0xFF : 0x01) << (8 * j);
  return units;
}
constexpr std::array<uint64_t, 256> MakeSignUnits() {
  std::array<uint64_t, 256> units{};
  for (uint32_t i = 0; i < 256; ++i) units[i] = SignUnits(i);
  return units;
}
constexpr std::array<uint64_t, 128> MakeIQ2SignUnits() {
  std::array<uint64_t, 128> units{};
  for (uint32_t i = 0; i < 128; ++i) units[i] = SignUnits(quant::IQ2Signs(i));
  return units;
}
inline constexpr std::array<uint64_t, 256> kSignUnits = MakeSignUnits();
inline constexpr std::array<uint64_t, 128> kIQ2SignUnits = MakeIQ2SignUnits();

#if PETREL_QUANT_SIMD
// Four 8-byte rows (elements 8i..8i+7 from rows[i], little-endian) as the kQVecs vectors of one
// 32-element chunk, built in registers.
HWY_INLINE void RowsToChunk(const uint64_t (&rows)[4], QVU8 (&out)[kQVecs]) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  // Each row broadcast from memory (a load, no shuffle) and blended into place: inserting them
  // took three shuffles per chunk, and the shuffle port bounded the codebook kernels.
  static_assert(kQVecs == 1);
  const __m256i r0 = _mm256_set1_epi64x(int64_t(rows[0]));
  const __m256i r1 = _mm256_set1_epi64x(int64_t(rows[1]));
  const __m256i r2 = _mm256_set1_epi64x(int64_t(rows[2]));
  const __m256i r3 = _mm256_set1_epi64x(int64_t(rows[3]));
  out[0] = QVU8{_mm256_blend_epi32(_mm256_blend_epi32(r0, r1, 0x0C),
                                   _mm256_blend_epi32(r2, r3, 0xC0), 0xF0)};
#elif HWY_ARCH_X86
  static_assert(kQVecs == 2);
  out[0] = QVU8{_mm_set_epi64x(int64_t(rows[1]), int64_t(rows[0]))};
  out[1] = QVU8{_mm_set_epi64x(int64_t(rows[3]), int64_t(rows[2]))};
#elif HWY_TARGET == HWY_NEON && HWY_ARCH_ARM_A64
  static_assert(kQVecs == 2);
  out[0] = QVU8(vcombine_u8(vcreate_u8(rows[0]), vcreate_u8(rows[1])));
  out[1] = QVU8(vcombine_u8(vcreate_u8(rows[2]), vcreate_u8(rows[3])));
#else
  constexpr size_t kLanes = hn::MaxLanes(QDU8());
  HWY_ALIGN uint8_t bytes[32];
  std::memcpy(bytes, rows, 32);
  for (size_t v = 0; v < kQVecs; ++v) out[v] = hn::Load(QDU8(), bytes + v * kLanes);
#endif
}

// Eight 4-byte rows (elements 4i..4i+3 from words[i]) as the kQVecs vectors of one chunk.
HWY_INLINE void WordsToChunk(const uint32_t (&words)[8], QVU8 (&out)[kQVecs]) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  static_assert(kQVecs == 1);  // broadcasts and blends, as RowsToChunk
  __m256i w[8];
  for (size_t i = 0; i < 8; ++i) w[i] = _mm256_set1_epi32(int(words[i]));
  const __m256i w0123 = _mm256_blend_epi32(_mm256_blend_epi32(w[0], w[1], 0x02),
                                           _mm256_blend_epi32(w[2], w[3], 0x08), 0x0C);
  const __m256i w4567 = _mm256_blend_epi32(_mm256_blend_epi32(w[4], w[5], 0x20),
                                           _mm256_blend_epi32(w[6], w[7], 0x80), 0xC0);
  out[0] = QVU8{_mm256_blend_epi32(w0123, w4567, 0xF0)};
#elif HWY_ARCH_X86
  static_assert(kQVecs == 2);
  out[0] = QVU8{_mm_set_epi32(int(words[3]), int(words[2]), int(words[1]), int(words[0]))};
  out[1] = QVU8{_mm_set_epi32(int(words[7]), int(words[6]), int(words[5]), int(words[4]))};
#else
  uint64_t rows[4];
  for (size_t i = 0; i < 4; ++i) rows[i] = words[2 * i] | uint64_t(words[2 * i + 1]) << 32;
  RowsToChunk(rows, out);
#endif
}

// RowsToChunk and WordsToChunk from pointers into a codebook: on AVX2 and up each row is
// broadcast straight from the table (vpbroadcastq/d m, a load), never through a register.
HWY_INLINE void RowPtrsToChunk(const uint64_t* const (&rows)[4], QVU8 (&out)[kQVecs]) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  __m256i r[4];
  for (size_t i = 0; i < 4; ++i) {
    r[i] = _mm256_broadcastq_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rows[i])));
  }
  out[0] = QVU8{_mm256_blend_epi32(_mm256_blend_epi32(r[0], r[1], 0x0C),
                                   _mm256_blend_epi32(r[2], r[3], 0xC0), 0xF0)};
#else
  const uint64_t values[4] = {*rows[0], *rows[1], *rows[2], *rows[3]};
  RowsToChunk(values, out);
#endif
}
HWY_INLINE void WordPtrsToChunk(const uint32_t* const (&words)[8], QVU8 (&out)[kQVecs]) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  __m256i w[8];
  for (size_t i = 0; i < 8; ++i) {
    w[i] = _mm256_broadcastd_epi32(_mm_cvtsi32_si128(int(*words[i])));
  }
  const __m256i w0123 = _mm256_blend_epi32(_mm256_blend_epi32(w[0], w[1], 0x02),
                                           _mm256_blend_epi32(w[2], w[3], 0x08), 0x0C);
  const __m256i w4567 = _mm256_blend_epi32(_mm256_blend_epi32(w[4], w[5], 0x20),
                                           _mm256_blend_epi32(w[6], w[7], 0x80), 0xC0);
  out[0] = QVU8{_mm256_blend_epi32(w0123, w4567, 0xF0)};
#else
  uint32_t values[8];
  for (size_t i = 0; i < 8; ++i) values[i] = *words[i];
  WordsToChunk(values, out);
#endif
}

// The same for four rows of +1/-1 sign bytes.
HWY_INLINE void SignRowsToChunk(const uint64_t (&rows)[4], QVI8 (&out)[kQVecs]) {
  QVU8 bytes[kQVecs];
  RowsToChunk(rows, bytes);
  for (size_t v = 0; v < kQVecs; ++v) out[v] = hn::BitCast(QDI8(), bytes[v]);
}

// x, negated where the chunk's sign bits are set: vector v of a chunk whose sign word (bit j of
// byte i: element 8i + j is negative) is at `bits`. On AVX-512 the bits load straight into a
// mask register; elsewhere LoadMaskBits spreads them with a byte shuffle. -(-128) wraps to -128,
// as ApplySign's does, so both give the same levels.
HWY_INLINE QVI8 NegateWhere(QVI8 x, const uint8_t* HWY_RESTRICT bits, size_t v) {
  const QDI8 d8;
  const auto negative = hn::LoadMaskBits(d8, bits + v * hn::MaxLanes(d8) / 8);
  return hn::IfThenElse(negative, hn::Neg(x), x);
}

// Rows of eight int16 lanes equal to their index: the halves of a chunk's scale vector, loaded
// rather than broadcast from a register (each broadcast is a shuffle, the port these decoders
// are short of).
struct ScaleRows {
  alignas(16) int16_t rows[32][8];
};
constexpr ScaleRows MakeScaleRows() {
  ScaleRows table{};
  for (int16_t s = 0; s < 32; ++s) {
    for (size_t i = 0; i < 8; ++i) table.rows[s][i] = s;
  }
  return table;
}
inline constexpr ScaleRows kScaleRows = MakeScaleRows();

// ChunkScales16 for scales s0, s1 in [0, 32); kOneScale: s0 == s1 (one 16-byte row broadcast).
template <bool kOneScale>
HWY_INLINE void ChunkScalesFromRows(int16_t s0, int16_t s1, QVI16 (&out)[kQVecs]) {
  const QDI16 d16;
  if constexpr (kQVecs == 1 && kOneScale && hn::MaxLanes(QDI16()) == 16) {
    out[0] = hn::LoadDup128(d16, kScaleRows.rows[s0]);
  } else if constexpr (kQVecs == 1) {
    const hn::Half<QDI16> dh;
    out[0] = hn::Combine(d16, hn::Load(dh, kScaleRows.rows[s1]), hn::Load(dh, kScaleRows.rows[s0]));
  } else {
    out[0] = hn::Load(d16, kScaleRows.rows[s0]);
    out[1] = hn::Load(d16, kScaleRows.rows[s1]);
  }
}

// Makes the compiler keep what was stored at `p` in memory and read it back from there: the
// sign words are read one 32-bit word at a time into mask registers (a load each), which it
// would otherwise extract from the vector it stored (a shuffle each).
HWY_INLINE void ReadBackFromMemory(const void* p) {
#if defined(__GNUC__)
  asm volatile("" : : "r"(p) : "memory");
#else
  (void)p;
#endif
}

// The sign words of a super-block's eight chunks from their IQ2/IQ3 sign fields: four 7-bit
// groups in bits 0..27 of each (the scale above them is dropped), each group's eighth bit its
// parity (quant::IQ2Signs), for all eight chunks at once.
HWY_INLINE void EvenSignWords(const uint32_t (&fields)[8], uint32_t (&words)[8]) {
  const hn::CappedTag<uint32_t, 8> d;
  for (size_t i = 0; i < 8; i += hn::Lanes(d)) {
    const auto a = hn::LoadU(d, fields + i);
    // Group l to byte l.
    const auto low = hn::Or(hn::And(a, hn::Set(d, 0x7Fu)),
                            hn::And(hn::ShiftLeft<1>(a), hn::Set(d, 0x7F00u)));
    const auto high = hn::Or(hn::And(hn::ShiftLeft<2>(a), hn::Set(d, 0x7F0000u)),
                             hn::And(hn::ShiftLeft<3>(a), hn::Set(d, 0x7F000000u)));
    const auto groups = hn::Or(low, high);
    // Bit 0 of each byte becomes the parity of its byte: each step folds only bits of the same
    // byte into the bits that the next step reads.
    auto parity = hn::Xor(groups, hn::ShiftRight<4>(groups));
    parity = hn::Xor(parity, hn::ShiftRight<2>(parity));
    parity = hn::Xor(parity, hn::ShiftRight<1>(parity));
    const auto eighth = hn::ShiftLeft<7>(hn::And(parity, hn::Set(d, 0x01010101u)));
    hn::StoreU(hn::Or(groups, eighth), d, words + i);
  }
  ReadBackFromMemory(words);
}

// IQ1 levels of a chunk: 8 g + delta, g the rows' bytes (-1, 0, +1) and delta[i] (+-1) that of
// elements 8i..8i+7; as magnitudes and the levels themselves for their signs (never 0).
HWY_INLINE void IQ1Chunk(const uint64_t (&rows)[4], const int8_t (&delta)[4], QVU8 (&mags)[kQVecs],
                         QVI8 (&levels)[kQVecs]) {
  const QDI8 d8;
  QVU8 grid[kQVecs], deltas[kQVecs];
  RowsToChunk(rows, grid);
  uint64_t delta_rows[4];
  for (size_t i = 0; i < 4; ++i) {
    delta_rows[i] = delta[i] < 0 ? ~uint64_t{0} : uint64_t{0x0101010101010101};
  }
  RowsToChunk(delta_rows, deltas);
  for (size_t v = 0; v < kQVecs; ++v) {
    const auto g = hn::BitCast(d8, grid[v]);
    const auto g2 = hn::Add(g, g);
    const auto g4 = hn::Add(g2, g2);
    levels[v] = hn::Add(hn::Add(g4, g4), hn::BitCast(d8, deltas[v]));
    mags[v] = hn::BitCast(QDU8(), hn::Abs(levels[v]));
  }
}

// The codebook formats (IQ1, IQ2, IQ3) as one shape: a Format provides Chunk(block, c, mags,
// signs), the magnitudes and the +-1 signs of elements 32c..32c+31; ChunkScales(block, c, s0,
// s1), the integer scales of its two halves; and Scale(block), the float super-block scale.
// A Format whose signs are bits may provide instead Mags(block, c, mags) and SignWords(block,
// words), the sign words of the eight chunks (NegateWhere), made once per super-block.
// DecodeGridK fills DecodedK from them (prompt tiles); DotGridK dots a super-block with one
// token's activations straight from the block (single tokens), with the int32 lanes DotK gives
// for DecodeGridK's levels: element 4i..4i+3 of each chunk vector into lane i, products and
// scales the same integers, so a token's result does not depend on which path it took.
template <class F>
concept GridSignWords = requires(const typename F::WBlock& block, uint32_t (&words)[8]) {
  F::SignWords(block, words);
};

template <class F>
HWY_INLINE void DecodeGridK(const typename F::WBlock& block, DecodedK& w) {
  const QDI8 d8;
  const QDU8 du8;
  constexpr size_t kLanes = hn::MaxLanes(QDI8());
  uint32_t words[8];
  if constexpr (GridSignWords<F>) F::SignWords(block, words);
  for (size_t c = 0; c < 8; ++c) {
    QVU8 mags[kQVecs];
    QVI8 signs[kQVecs];
    if constexpr (GridSignWords<F>) {
      F::Mags(block, c, mags);
    } else {
      F::Chunk(block, c, mags, signs);
    }
    for (size_t v = 0; v < kQVecs; ++v) {
      const auto mag = hn::BitCast(d8, mags[v]);
      QVI8 level;
      if constexpr (GridSignWords<F>) {
        level = NegateWhere(mag, reinterpret_cast<const uint8_t*>(words + c), v);
      } else {
        level = ApplySign(mag, signs[v]);
      }
      hn::Store(hn::BitCast(du8, level), du8, w.q + 32 * c + v * kLanes);
    }
  }
  int16_t scale16[16];
  for (size_t c = 0; c < 8; ++c) F::ChunkScales(block, c, scale16[2 * c], scale16[2 * c + 1]);
  SetChunkScales16(scale16, w);
  w.d = F::Scale(block);
  w.dmin = 0.0f;
}

template <class F>
HWY_INLINE QVI32 DotGridK(const typename F::WBlock& block, const int8_t* HWY_RESTRICT x) {
  const QDI8 d8;
  constexpr size_t kLanes = hn::MaxLanes(QDI8());
  QVI32 sum0 = hn::Zero(QDI32()), sum1 = hn::Zero(QDI32());
  uint32_t words[8];
  if constexpr (GridSignWords<F>) F::SignWords(block, words);
  for (size_t c = 0; c < 8; ++c) {
    QVU8 mags[kQVecs];
    QVI8 signs[kQVecs];
    if constexpr (GridSignWords<F>) {
      F::Mags(block, c, mags);
    } else {
      F::Chunk(block, c, mags, signs);
    }
    int16_t s0, s1;
    F::ChunkScales(block, c, s0, s1);
    QVI16 scales[kQVecs];
    constexpr bool kOneScale = requires { requires F::kOneScalePerChunk; };
    ChunkScalesFromRows<kOneScale>(s0, s1, scales);
    for (size_t v = 0; v < kQVecs; ++v) {
      const auto xv = hn::LoadU(d8, x + 32 * c + v * kLanes);
      QVI8 signed_x;
      if constexpr (GridSignWords<F>) {
        signed_x = NegateWhere(xv, reinterpret_cast<const uint8_t*>(words + c), v);
      } else {
        signed_x = ApplySign(xv, signs[v]);
      }
      const auto prod = MulPairsI16(MulPairsU8I8(mags[v], signed_x), scales[v]);
      if (c % 2 == 0) {
        sum0 = hn::Add(sum0, prod);
      } else {
        sum1 = hn::Add(sum1, prod);
      }
    }
  }
  return hn::Add(sum0, sum1);
}

// Base-3 digit n of each byte of v, as TQ1_0 packs five per byte (four in qh), most significant
// first: ((v * 3^n mod 256) * 3) >> 8, in 16-bit lanes whose two bytes share `pow3` = 3^n.
template <class D>
HWY_INLINE hn::Vec<D> TernaryDigit(D d, hn::Vec<D> v, hn::Vec<hn::Repartition<uint16_t, D>> pow3) {
  const hn::Repartition<uint16_t, D> d16;
  const auto v16 = hn::BitCast(d16, v);
  const auto three = hn::Set(d16, 3);
  // (byte * 3^n mod 256) << 8 for the even and the odd bytes.
  const auto even = hn::Mul(hn::ShiftLeft<8>(v16), pow3);
  const auto odd = hn::Mul(hn::And(v16, hn::Set(d16, 0xFF00)), pow3);
  return hn::BitCast(d,
                     hn::Or(hn::MulHigh(even, three), hn::ShiftLeft<8>(hn::MulHigh(odd, three))));
}

// Stores the five base-3 digits of the 16 bytes at `src`: digit n (0..4) of byte m at
// q[n * stride + m].
HWY_INLINE void StoreTernaryDigits16(const uint8_t* HWY_RESTRICT src, size_t stride,
                                     uint8_t* HWY_RESTRICT q) {
  const hn::Full128<uint8_t> d;
  const hn::Full128<uint16_t> d16;
  const auto v = hn::LoadU(d, src);
  uint16_t pow3 = 1;
  for (size_t n = 0; n < 5; ++n, pow3 = uint16_t(pow3 * 3)) {
    hn::StoreU(TernaryDigit(d, v, hn::Set(d16, pow3)), d, q + n * stride);
  }
}

// Stores the four base-3 digits of the 4 bytes at `src`: digit n of byte m at q[4 n + m].
HWY_INLINE void StoreTernaryDigits4(const uint8_t* HWY_RESTRICT src, uint8_t* HWY_RESTRICT q) {
  const hn::Full128<uint8_t> d;
  const hn::Full128<uint16_t> d16;
  const hn::Full128<uint32_t> d32;
  alignas(16) static constexpr uint16_t kPow3[8] = {1, 1, 3, 3, 9, 9, 27, 27};
  uint32_t word;
  std::memcpy(&word, src, sizeof(word));
  const auto v = hn::BitCast(d, hn::Set(d32, word));  // byte j = src[j % 4]
  hn::StoreU(TernaryDigit(d, v, hn::Load(d16, kPow3)), d, q);
}
#endif  // PETREL_QUANT_SIMD

// The base of the codebook Formats: signed levels against Q8_K, DecodeGridK for prompt tiles and
// DotGridK for single tokens (QuantTileK's DotBlock).
template <class F>
struct GridFormat : SuperBlockPairFormat<0, false, true> {
#if PETREL_QUANT_SIMD
  template <class WBlock>
  static HWY_INLINE void Decode(const WBlock& block, DecodedK& w) {
    DecodeGridK<F>(block, w);
  }
  template <class WBlock>
  static HWY_INLINE QVI32 DotBlock(const WBlock& block, const int8_t* HWY_RESTRICT x) {
    return DotGridK<F>(block, x);
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
