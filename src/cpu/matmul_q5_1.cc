// mat_mul for Q5_1 weights against Q8_1 activations: one Highway foreach_target TU (the
// driver and dot helpers are in quant_dot-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q5_1.cc"
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
  using WBlock = quant::BlockQ5_1;
  static constexpr DType kType = DType::kQ5_1;
  static constexpr DType kActType = DType::kQ8_1;
  static constexpr size_t kElems = quant::kQK;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_1;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  static constexpr size_t kDecodeRows = 4;  // see MatMulQuantImpl
  static constexpr size_t kTileRows = kQuantTileRows32;
  static constexpr size_t kTileTokens = kQuantTileTokens32;

  // Levels 0..31 (nibble plus the fifth bit from qh) and a min.
  static HWY_INLINE void Decode(const WBlock& block, Decoded32<kSigned>& w) {
    DecodeNibbles32(block.qs, w.q);
    AddFifthBits32(block.qh, w.q);
    w.d = HalfToF32(block.d);
    w.m = HalfToF32(block.m);
  }
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

void MatMulQ5_1T(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
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

HWY_EXPORT(MatMulQ5_1T);

void MatMulQ5_1(const void* w, size_t w_row_bytes, size_t n_in, const void* xq, size_t xq_row_bytes,
                size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
                size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulQ5_1T)
  (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
