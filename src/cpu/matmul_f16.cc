// mat_mul for F16 weights: one Highway foreach_target TU (the body is in matmul-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_f16.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {

void MatMulF16T(const void* w, size_t w_row_bytes, size_t n_in, const float* x, size_t x_stride,
                size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
                size_t row_end) {
  MatMulImpl<hwy::float16_t>(w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride,
                             row_begin, row_end);
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(MatMulF16T);

void MatMulF16(const void* w, size_t w_row_bytes, size_t n_in, const float* x, size_t x_stride,
               size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
               size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulF16T)
  (w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
