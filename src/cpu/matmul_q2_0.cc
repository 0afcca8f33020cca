// mat_mul for Q2_0 weights: one Highway foreach_target TU on the pair-per-block driver
// (quant_dot-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// A block is 64 2-bit levels q (element j in bits 2 (j % 4) of byte j / 4) sharing one f16 scale
// d, valued d (q - 1). Each of its two 32-element sub-blocks meets one Q8_0 block as unsigned
// levels with an offset of 1, the offset subtracted in the int16 pair sums.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q2_0.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/matmul_entry.h"
#include "cpu/quant_grid-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

// The four 2-bit levels of each byte as the four bytes of a uint32.
constexpr std::array<uint32_t, 256> MakeSpreadLevels() {
  std::array<uint32_t, 256> spread{};
  for (uint32_t b = 0; b < 256; ++b) {
    for (uint32_t i = 0; i < 4; ++i) spread[b] |= ((b >> (2 * i)) & 3) << (8 * i);
  }
  return spread;
}
inline constexpr std::array<uint32_t, 256> kSpreadLevels = MakeSpreadLevels();

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

  static HWY_INLINE void Decode(const WBlock& block, size_t sub, Decoded32<false>& w) {
    const uint8_t* bytes = block.qs + 8 * sub;
    uint64_t rows[4];
    for (size_t i = 0; i < 4; ++i) {
      rows[i] = kSpreadLevels[bytes[2 * i]] | uint64_t(kSpreadLevels[bytes[2 * i + 1]]) << 32;
    }
    RowsToChunk(rows, w.q);
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
