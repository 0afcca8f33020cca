// mat_mul for IQ4_NL weights against Q8_0 activations: one Highway foreach_target TU (the
// driver and dot helpers are in quant_dot-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_iq4_nl.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/quant_dot-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format {
  using WBlock = quant::BlockIQ4_NL;
  static constexpr DType kType = DType::kIQ4_NL;
  static constexpr DType kActType = DType::kQ8_0;
  static constexpr size_t kElems = quant::kQK;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_0;
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = false;
  static constexpr size_t kDecodeRows = 4;  // see MatMulQuantImpl
  static constexpr size_t kTileRows = kQuantTileRows32;
  static constexpr size_t kTileTokens = kQuantTileTokens32;

  // The 16-entry int8 grid in every 128-bit block of a vector, for TableLookupBytes.
  static HWY_INLINE QVI8 Grid() {
    const QDI8 d8;
    if constexpr (kQVecs == 1) {
      const hn::Half<QDI8> dh;
      const auto half = hn::LoadU(dh, quant::kIQ4NLValues);
      return hn::Combine(d8, half, half);
    } else {
      return hn::LoadU(d8, quant::kIQ4NLValues);
    }
  }
  // Nibbles index the non-linear grid: one byte shuffle per vector.
  static HWY_INLINE void Decode(const WBlock& block, Decoded32<kSigned>& w) {
    const QDI8 d8;
    const QVI8 grid = Grid();
    QVU8 idx[kQVecs];
    DecodeNibbles32(block.qs, idx);
    for (size_t v = 0; v < kQVecs; ++v)
      w.q[v] = hn::TableLookupBytes(grid, hn::BitCast(d8, idx[v]));
    w.d = HalfToF32(block.d);
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

void MatMulIQ4_NLT(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                   size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                   size_t out_stride, size_t row_begin, size_t row_end) {
  MatMulQuantImpl<Format>(w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride,
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
