// Decode helpers of the codebook and low-bit formats (IQ1_S..IQ3_S, TQ1_0, TQ2_0, Q1_0, Q2_0) on
// the pair-per-block driver (quant_dot-inl.h): 32 elements built from 8-byte codebook rows in
// registers, sign bits applied to them, and base-3 digits unpacked, into DecodedK's int8 levels.
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

#include "cpu/quant_dot-inl.h"
#include "hwy/highway.h"
#include "quant/iq_grids.h"  // IQ2Signs

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {

// The eight sign bits of each 7-bit IQ2/IQ3 sign group (the eighth from the parity).
constexpr std::array<uint8_t, 128> MakeIQ2SignBytes() {
  std::array<uint8_t, 128> bytes{};
  for (uint32_t i = 0; i < 128; ++i) bytes[i] = quant::IQ2Signs(i);
  return bytes;
}
inline constexpr std::array<uint8_t, 128> kIQ2SignBytes = MakeIQ2SignBytes();

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

// The magnitudes negated where bit i of the 32 little-endian bits at `signs` is set, stored as
// int8 levels at `q` (32 bytes).
HWY_INLINE void StoreSigned32(const QVU8 (&mags)[kQVecs], const uint8_t* HWY_RESTRICT signs,
                              uint8_t* HWY_RESTRICT q) {
  const QDI8 d8;
  constexpr size_t kLanes = hn::MaxLanes(QDI8());
  for (size_t v = 0; v < kQVecs; ++v) {
    const auto m = hn::BitCast(d8, mags[v]);
    const auto negative = hn::LoadMaskBits(d8, signs + v * kLanes / 8);
    hn::Store(hn::BitCast(QDU8(), hn::IfThenElse(negative, hn::Neg(m), m)), QDU8(), q + v * kLanes);
  }
}

// The 32 signed levels of a chunk from four 8-byte codebook rows and four sign bytes.
HWY_INLINE void StoreGridChunk(const uint64_t (&rows)[4], const uint8_t* HWY_RESTRICT signs,
                               uint8_t* HWY_RESTRICT q) {
  QVU8 mags[kQVecs];
  RowsToChunk(rows, mags);
  StoreSigned32(mags, signs, q);
}

// IQ1 levels of a chunk: 8 g + delta, g the rows' bytes (-1, 0, +1) and delta[i] (+-1) that of
// elements 8i..8i+7.
HWY_INLINE void StoreIQ1Chunk(const uint64_t (&rows)[4], const int8_t (&delta)[4],
                              uint8_t* HWY_RESTRICT q) {
  const QDI8 d8;
  constexpr size_t kLanes = hn::MaxLanes(QDI8());
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
    const auto level = hn::Add(hn::Add(g4, g4), hn::BitCast(d8, deltas[v]));
    hn::Store(hn::BitCast(QDU8(), level), QDU8(), q + v * kLanes);
  }
}

// Base-3 digit `kPow3` (1, 3, 9, 27 or 81 for digits 0..4, most significant first) of each byte
// of v, as TQ1_0 packs five per byte: ((v * kPow3 mod 256) * 3) >> 8, in 16-bit lanes.
template <uint16_t kPow3, class D>
HWY_INLINE hn::Vec<D> TernaryDigit(D d, hn::Vec<D> v) {
  const hn::Repartition<uint16_t, D> d16;
  const auto v16 = hn::BitCast(d16, v);
  const auto pow3 = hn::Set(d16, kPow3);
  const auto three = hn::Set(d16, 3);
  // (byte * kPow3 mod 256) << 8 for the even and the odd bytes.
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
  const auto v = hn::LoadU(d, src);
  hn::StoreU(TernaryDigit<1>(d, v), d, q);
  hn::StoreU(TernaryDigit<3>(d, v), d, q + stride);
  hn::StoreU(TernaryDigit<9>(d, v), d, q + 2 * stride);
  hn::StoreU(TernaryDigit<27>(d, v), d, q + 3 * stride);
  hn::StoreU(TernaryDigit<81>(d, v), d, q + 4 * stride);
}
#endif  // PETREL_QUANT_SIMD

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
