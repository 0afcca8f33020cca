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
  using XBlock = quant::BlockQ8_1;
  using Unpacked = Unpacked32;
  static constexpr size_t kElems = quant::kQK;

  static HWY_INLINE void Unpack(const WBlock& block, Unpacked& u) {
    UnpackNibbles(block.qs, 0, u.q, u.q + 16);
    uint32_t qh;
    std::memcpy(&qh, block.qh, sizeof(qh));
    AddHighBits32(qh, 0, u.q);
    u.d = HalfToF32(block.d);
    u.m = HalfToF32(block.m);
  }
  static HWY_INLINE void Dot(const Unpacked& u, const XBlock& x, QVecF& acc, float& acc_scalar) {
    DotQ8_1Block(u, x, acc, acc_scalar);
  }
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
