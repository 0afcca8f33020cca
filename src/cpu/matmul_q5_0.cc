// mat_mul for Q5_0 weights against Q8_0 activations: one Highway foreach_target TU over the
// rows-in-lanes driver (quant_lanes-inl.h).
//
// Q4_0's nibbles plus a fifth bit per element from the block's qh word: PackNibbles transposes
// the nibbles as for Q4_0, one gather fetches the qh words of the 8 rows, and FifthBitLevels
// makes the unsigned levels 0..31, which DotFiveBitLevels multiplies with the activations; the
// offset of 16 enters through the activation block's sum.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q5_0.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/quant_lanes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format
#if PETREL_QUANT_SIMD
    : Lanes32Format<Format, 8, 16>, FiveBitQuants<quant::BlockQ5_0>
#endif
{
  using WBlock = quant::BlockQ5_0;
  static constexpr DType kType = DType::kQ5_0;
  static constexpr DType kActType = DType::kQ8_0;
  static constexpr size_t kElems = quant::kQK;
};

}  // namespace

void MatMulQ5_0T(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
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

HWY_EXPORT(MatMulQ5_0T);

void MatMulQ5_0(const void* w, size_t w_row_bytes, size_t n_in, const void* xq, size_t xq_row_bytes,
                size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
                size_t row_end) {
  HWY_DYNAMIC_DISPATCH(MatMulQ5_0T)
  (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
