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
  static_assert(kQVecs == 1);
  out[0] = QVU8{
      _mm256_set_epi64x(int64_t(rows[3]), int64_t(rows[2]), int64_t(rows[1]), int64_t(rows[0]))};
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
  static_assert(kQVecs == 1);
  out[0] = QVU8{_mm256_set_epi32(int(words[7]), int(words[6]), int(words[5]), int(words[4]),
                                 int(words[3]), int(words[2]), int(words[1]), int(words[0]))};
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

// The same for four rows of +1/-1 sign bytes.
HWY_INLINE void SignRowsToChunk(const uint64_t (&rows)[4], QVI8 (&out)[kQVecs]) {
  QVU8 bytes[kQVecs];
  RowsToChunk(rows, bytes);
  for (size_t v = 0; v < kQVecs; ++v) out[v] = hn::BitCast(QDI8(), bytes[v]);
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
// DecodeGridK fills DecodedK from them (prompt tiles); DotGridK dots a super-block with one
// token's activations straight from the block (single tokens), with the int32 lanes DotK gives
// for DecodeGridK's levels: element 4i..4i+3 of each chunk vector into lane i, products and
// scales the same integers, so a token's result does not depend on which path it took.
template <class F>
HWY_INLINE void DecodeGridK(const typename F::WBlock& block, DecodedK& w) {
  const QDI8 d8;
  const QDU8 du8;
  constexpr size_t kLanes = hn::MaxLanes(QDI8());
  for (size_t c = 0; c < 8; ++c) {
    QVU8 mags[kQVecs];
    QVI8 signs[kQVecs];
    F::Chunk(block, c, mags, signs);
    for (size_t v = 0; v < kQVecs; ++v) {
      const auto level = ApplySign(hn::BitCast(d8, mags[v]), signs[v]);
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
  for (size_t c = 0; c < 8; ++c) {
    QVU8 mags[kQVecs];
    QVI8 signs[kQVecs];
    F::Chunk(block, c, mags, signs);
    int16_t s0, s1;
    F::ChunkScales(block, c, s0, s1);
    QVI16 scales[kQVecs];
    ChunkScales16(s0, s1, scales);
    for (size_t v = 0; v < kQVecs; ++v) {
      const auto xv = hn::LoadU(d8, x + 32 * c + v * kLanes);
      const auto prod = MulPairsI16(MulPairsU8I8(mags[v], ApplySign(xv, signs[v])), scales[v]);
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
