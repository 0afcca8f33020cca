// mat_mul for Q2_0 weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// A block is 64 2-bit levels q (element j in bits 2 (j % 4) of byte j / 4) sharing one f16 scale
// d, valued d (q - 1). Each of its two 32-element sub-blocks meets one Q8_0 block as unsigned
// levels with an offset of 1, the offset subtracted in the int16 pair sums.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_q2_0.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include <array>
#include <cstring>

#include "cpu/kernel_entry_points.h"
#include "cpu/matmul/matmul_entry.h"
#include "cpu/matmul/quant_grid-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

// Byte tables for Decode: element j of a sub-block takes byte j / 4 of its 8 bytes (kind 0) and
// bits 2 (j % 4) (kind 1) and 2 (j % 4) + 1 (kind 2) of it.
constexpr std::array<uint8_t, 32> MakeQ2_0Table(int kind) {
  std::array<uint8_t, 32> table{};
  for (size_t j = 0; j < 32; ++j) {
    table[j] = kind == 0 ? uint8_t(j / 4) : uint8_t(kind << (2 * (j % 4)));
  }
  return table;
}
alignas(32) inline constexpr std::array<uint8_t, 32> kQ2_0ByteOf = MakeQ2_0Table(0);
alignas(32) inline constexpr std::array<uint8_t, 32> kQ2_0LowBit = MakeQ2_0Table(1);
alignas(32) inline constexpr std::array<uint8_t, 32> kQ2_0HighBit = MakeQ2_0Table(2);

struct Format {
  using WBlock = quant::BlockQ2_0;
  static constexpr DType kType = DType::kQ2_0;
  static constexpr size_t kElems = quant::kQK2_0;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_0;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 1;
  static constexpr bool kHasMin = false;
  static constexpr size_t kDecodeRows = 2;  // see MatMulQuantImpl
  static constexpr size_t kTileRows = kQuantTileRows32;
  static constexpr size_t kTileTokens = kQuantTileTokens32;

  // The sub-block's 8 bytes in every 64-bit lane, spread one byte to four elements by a byte
  // shuffle (within each 128-bit block, which holds all 8), and each element's two bits tested.
  static HWY_INLINE void Decode(const WBlock& block, size_t sub, Decoded32<false>& w) {
    const QDU8 du8;
    constexpr size_t kLanes = hn::MaxLanes(QDU8());
    uint64_t word;
    std::memcpy(&word, block.qs + 8 * sub, sizeof(word));
    const auto bytes = hn::BitCast(du8, hn::Set(hn::Repartition<uint64_t, QDU8>(), word));
    const auto one = hn::Set(du8, 1), two = hn::Set(du8, 2);
    for (size_t v = 0; v < kQVecs; ++v) {
      const size_t i = v * kLanes;
      const auto spread = hn::TableLookupBytes(bytes, hn::Load(du8, kQ2_0ByteOf.data() + i));
      const auto low = hn::TestBit(spread, hn::Load(du8, kQ2_0LowBit.data() + i));
      const auto high = hn::TestBit(spread, hn::Load(du8, kQ2_0HighBit.data() + i));
      w.q[v] = hn::Or(hn::IfThenElseZero(low, one), hn::IfThenElseZero(high, two));
    }
    w.d = HalfToF32(block.d);
    w.m = 0.0f;
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_QUANT_MATMUL_TARGET(Q2_0, MatMulQuantImpl)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(Q2_0)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
