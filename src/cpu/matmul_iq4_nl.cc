// mat_mul for IQ4_NL weights against Q8_0 activations: one Highway foreach_target TU over the
// rows-in-lanes driver (quant_lanes-inl.h).
//
// A block is Q4_0's layout with a non-linear grid: its nibbles are transposed as Q4_0's (lane l
// of vector s holds bytes 4s..4s+3 of row l, low nibbles group s, high nibbles group s + 4) and
// then index the grid by one byte shuffle each, at pack time. The packed block is then Q8_0's:
// signed int8 levels (|level| <= 127), dotted by DotSignedGroups.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_iq4_nl.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include <array>
#include <cstdint>

#include "cpu/kernel_entry_points.h"
#include "cpu/quant_lanes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

#if PETREL_QUANT_SIMD
// The grid's bytes, aligned for LoadDup128 (one copy in every 128-bit block of a vector).
constexpr std::array<uint8_t, 16> MakeGrid() {
  std::array<uint8_t, 16> grid{};
  for (size_t i = 0; i < 16; ++i) grid[i] = uint8_t(quant::kIQ4NLValues[i]);
  return grid;
}
alignas(16) constexpr std::array<uint8_t, 16> kGrid = MakeGrid();
#endif

struct Format
#if PETREL_QUANT_SIMD
    : Lanes32Format<Format, 8, 0>
#endif
{
  using WBlock = quant::BlockIQ4_NL;
  static constexpr DType kType = DType::kIQ4_NL;
  static constexpr DType kActType = DType::kQ8_0;
  static constexpr size_t kElems = quant::kQK;
#if PETREL_QUANT_SIMD
  static HWY_INLINE void PackQuants(const WBlock* const* HWY_RESTRICT rows,
                                    const LaneRowOffsets& /*offsets*/, size_t b,
                                    QVU8Full (&p)[kPacked]) {
    const QDU8 du8;
    const hn::Repartition<uint16_t, QDU8> du16;
    QVU8Full nibbles[4];
    PackNibbles(rows, b, nibbles);
    const auto mask = hn::Set(du8, 0x0F);
    const auto grid = hn::LoadDup128(du8, kGrid.data());
    for (size_t s = 0; s < 4; ++s) {
      const auto lo = hn::And(nibbles[s], mask);
      const auto hi = hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, nibbles[s]))), mask);
      p[s] = hn::TableLookupBytes(grid, lo);
      p[s + 4] = hn::TableLookupBytes(grid, hi);
    }
  }

  template <size_t T>
  static HWY_INLINE void DotInt(const QVU8Full (&p)[kPacked], const XBlock* const* HWY_RESTRICT x,
                                size_t b, hn::Vec<QDI32> (&isum)[T]) {
    DotSignedGroups<kPacked, T>(p, x, b, isum);
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

void MatMulIQ4_NLT(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                   size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                   size_t out_stride, size_t row_begin, size_t row_end) {
  LaneMatMulImpl<Format>(w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride,
                         row_begin, row_end);
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(MatMulIQ4_NLT);

void MatMulIQ4_NL(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                  size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                  size_t out_stride, size_t row_begin, size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulIQ4_NLT)
  (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
