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
  using XBlock = quant::BlockQ8_K;
  using Unpacked = Unpacked256;
  static constexpr size_t kElems = quant::kQK_K;

  static HWY_INLINE void Unpack(const WBlock& block, Unpacked& u) {
    // Grid values times each 32-block's 6-bit scale (|value * scale| <= 127 * 32 fits int16).
    for (size_t ib = 0; ib < quant::kQK_K / quant::kQK; ++ib) {
      const int scale = quant::IQ4XSScale(block, ib);
      const uint8_t* qs = block.qs + 16 * ib;
      int16_t* q = u.q + 32 * ib;
      for (size_t j = 0; j < 16; ++j) {
        q[j] = int16_t(quant::kIQ4NLValues[qs[j] & 0xF] * scale);
        q[j + 16] = int16_t(quant::kIQ4NLValues[qs[j] >> 4] * scale);
      }
    }
    u.d = HalfToF32(block.d);
    u.dmin = 0.0f;
  }
  static HWY_INLINE void Dot(const Unpacked& u, const XBlock& x, QVecF& acc, float& acc_scalar) {
    DotQ8_KBlock(u, x, acc, acc_scalar, /*has_mins=*/false);
  }
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
