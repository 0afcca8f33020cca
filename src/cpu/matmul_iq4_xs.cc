// mat_mul for IQ4_XS weights against Q8_K activations: one Highway foreach_target TU (the
// driver and dot helpers are in quant_dot-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_iq4_xs.cc"
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
  using WBlock = quant::BlockIQ4_XS;
  static constexpr DType kType = DType::kIQ4_XS;
  static constexpr DType kActType = DType::kQ8_K;
  static constexpr size_t kElems = quant::kQK_K;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_K;
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMins = false;
  static constexpr size_t kDecodeRows = 2;  // see MatMulQuantImpl
  static constexpr size_t kTileRows = 1;
  static constexpr size_t kTileTokens = 4;

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
  // Chunk ib: nibbles of qs[16 ib..] index the grid (as IQ4_NL); a 6-bit scale per 32 elements.
  static HWY_INLINE void Decode(const WBlock& block, DecodedK& w) {
    const QDI8 d8;
    const QDU8 du8;
    constexpr size_t kLanes = hn::MaxLanes(QDU8());
    const QVI8 grid = Grid();
    int16_t scale32[8];
    for (size_t ib = 0; ib < 8; ++ib) {
      QVU8 idx[kQVecs];
      DecodeNibbles32(block.qs + 16 * ib, idx);
      for (size_t v = 0; v < kQVecs; ++v) {
        hn::Store(hn::BitCast(du8, hn::TableLookupBytes(grid, hn::BitCast(d8, idx[v]))), du8,
                  w.q + 32 * ib + v * kLanes);
      }
      scale32[ib] = int16_t(quant::IQ4XSScale(block, ib));
    }
    SetChunkScales32(scale32, w);
    w.d = HalfToF32(block.d);
    w.dmin = 0.0f;
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

void MatMulIQ4_XST(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
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

HWY_EXPORT(MatMulIQ4_XST);

void MatMulIQ4_XS(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                  size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                  size_t out_stride, size_t row_begin, size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulIQ4_XST)
  (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
