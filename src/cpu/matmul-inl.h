// Per-target mat_mul body shared by the per-weight-type TUs (matmul_f32.cc, matmul_f16.cc, ...).

#if defined(PETREL_CPU_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PETREL_CPU_MATMUL_INL_H_
#undef PETREL_CPU_MATMUL_INL_H_
#else
#define PETREL_CPU_MATMUL_INL_H_
#endif

#include <cstddef>

#include "cpu/simd-inl.h"  // LoadAsF32, CopyPadded, Accumulate, FinishDot
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows [row, row + kRows) for every token. Two accumulators per (row, token) with the layout of
// simd-inl.h's `Dot`; with kRows = 4 that is 8 independent FMA chains, enough to hide FMA
// latency while the weight stream is the bottleneck, and each x vector is loaded once per 4 rows.
template <size_t kRows, typename TW>
HWY_INLINE void MatMulRowBlock(const char* HWY_RESTRICT w, size_t w_row_bytes, size_t n_in,
                               const float* HWY_RESTRICT x, size_t x_stride, size_t n_tokens,
                               const float* HWY_RESTRICT bias, float* HWY_RESTRICT out,
                               size_t out_stride, size_t row) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t lanes = hn::Lanes(d);
  const size_t n_full = n_in / lanes;
  const size_t tail = n_in - n_full * lanes;

  const TW* w_rows[kRows];  // each (n_in)
  HWY_ALIGN TW w_tail[kRows][kMaxF32Lanes];
  for (size_t j = 0; j < kRows; ++j) {
    w_rows[j] = reinterpret_cast<const TW*>(w + (row + j) * w_row_bytes);
    if (tail != 0) CopyPadded(w_rows[j] + n_full * lanes, tail, w_tail[j]);
  }

  for (size_t t = 0; t < n_tokens; ++t) {
    const float* HWY_RESTRICT x_t = x + t * x_stride;  // (n_in)
    V acc0[kRows], acc1[kRows];
    for (size_t j = 0; j < kRows; ++j) acc0[j] = acc1[j] = hn::Zero(d);
    size_t k = 0;
    for (; k + 2 <= n_full; k += 2) {
      const V x0 = hn::LoadU(d, x_t + k * lanes);
      const V x1 = hn::LoadU(d, x_t + (k + 1) * lanes);
      for (size_t j = 0; j < kRows; ++j) {
        acc0[j] = hn::MulAdd(LoadAsF32(d, w_rows[j] + k * lanes), x0, acc0[j]);
        acc1[j] = hn::MulAdd(LoadAsF32(d, w_rows[j] + (k + 1) * lanes), x1, acc1[j]);
      }
    }
    if (k < n_full) {
      const V x0 = hn::LoadU(d, x_t + k * lanes);
      for (size_t j = 0; j < kRows; ++j) {
        acc0[j] = hn::MulAdd(LoadAsF32(d, w_rows[j] + k * lanes), x0, acc0[j]);
      }
    }
    if (tail != 0) {
      HWY_ALIGN float x_tail[kMaxF32Lanes];
      CopyPadded(x_t + n_full * lanes, tail, x_tail);
      const V xv = hn::LoadU(d, x_tail);
      for (size_t j = 0; j < kRows; ++j) {
        Accumulate(n_full, LoadAsF32(d, w_tail[j]), xv, acc0[j], acc1[j]);
      }
    }
    float* HWY_RESTRICT out_t = out + t * out_stride;
    for (size_t j = 0; j < kRows; ++j) {
      out_t[row + j] = FinishDot(d, acc0[j], acc1[j]) + (bias ? bias[row + j] : 0.0f);
    }
  }
}

// The HostKernels::mat_mul contract for weights of element type TW.
template <typename TW>
HWY_INLINE void MatMulImpl(const void* w, size_t w_row_bytes, size_t n_in, const float* x,
                           size_t x_stride, size_t n_tokens, const float* bias, float* out,
                           size_t out_stride, size_t row_begin, size_t row_end) {
  const char* w_bytes = static_cast<const char*>(w);
  size_t row = row_begin;
  for (; row + 4 <= row_end; row += 4) {
    MatMulRowBlock<4, TW>(w_bytes, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride,
                          row);
  }
  for (; row < row_end; ++row) {
    MatMulRowBlock<1, TW>(w_bytes, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride,
                          row);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
