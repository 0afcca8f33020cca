// mat_mul for Q4_K weights against Q8_K activations: one Highway foreach_target TU (the
// driver and dot helpers are in quant_dot-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q4_k.cc"
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
  using WBlock = quant::BlockQ4_K;
  using XBlock = quant::BlockQ8_K;
  using Unpacked = Unpacked256;
  static constexpr size_t kElems = quant::kQK_K;

  static HWY_INLINE void Unpack(const WBlock& block, Unpacked& u) {
    // Each 32 bytes hold sub-block 2j (low nibbles) and 2j + 1 (high nibbles).
    for (size_t j = 0; j < 4; ++j) {
      int16_t* q = u.q + 64 * j;
      UnpackNibbles(block.qs + 32 * j, 0, q, q + 32);
      UnpackNibbles(block.qs + 32 * j + 16, 0, q + 16, q + 48);
      uint8_t sc, m;
      quant::ScaleMinK4(2 * j, block.scales, &sc, &m);
      ScaleLevels(q, 32, sc);
      u.mins[4 * j] = u.mins[4 * j + 1] = m;
      quant::ScaleMinK4(2 * j + 1, block.scales, &sc, &m);
      ScaleLevels(q + 32, 32, sc);
      u.mins[4 * j + 2] = u.mins[4 * j + 3] = m;
    }
    u.d = HalfToF32(block.d);
    u.dmin = HalfToF32(block.dmin);
  }
  static HWY_INLINE void Dot(const Unpacked& u, const XBlock& x, QVecF& acc, float& acc_scalar) {
    DotQ8_KBlock(u, x, acc, acc_scalar, /*has_mins=*/true);
  }
};

}  // namespace

void MatMulQ4_KT(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
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

HWY_EXPORT(MatMulQ4_KT);

void MatMulQ4_K(const void* w, size_t w_row_bytes, size_t n_in, const void* xq, size_t xq_row_bytes,
                size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
                size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulQ4_KT)
  (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
