// The two ends of every per-weight-type mat_mul TU (matmul_*.cc), which differ only in names:
// the per-target function that runs the shared body, and, once per TU, its dynamic dispatch
// (the entry point that kernel_entry_points.h declares and kernels.cc puts in the table).
#pragma once

#include "cpu/matmul/matmul_table.h"  // FindMatMulKernel
#include "hwy/highway.h"       // HWY_EXPORT, HWY_DYNAMIC_DISPATCH

// Inside HWY_NAMESPACE: MatMul<name>T runs MatMulImpl<TW> (matmul-inl.h) on rows of TW.
#define PETREL_FLOAT_MATMUL_TARGET(name, TW)                                                    \
  void MatMul##name##T(const void* w, size_t w_row_bytes, size_t n_in, const float* x,          \
                       size_t x_stride, size_t n_tokens, const float* bias, float* out,         \
                       size_t out_stride, size_t row_begin, size_t row_end) {                   \
    MatMulImpl<TW>(w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride,         \
                   row_begin, row_end);                                                         \
  }

// Inside HWY_NAMESPACE: MatMul<name>T runs driver<Format> (LaneMatMulImpl or MatMulQuantImpl)
// for the TU's Format, which must be the one for DType::k<name>. The driver checks that it is
// the one the mat_mul table names and that the Format's activation blocks are the table's.
#define PETREL_QUANT_MATMUL_TARGET(name, driver)                                                \
  static_assert(Format::kType == DType::k##name, "MatMul" #name "T: a Format of another type"); \
  void MatMul##name##T(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,          \
                       size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,     \
                       size_t out_stride, size_t row_begin, size_t row_end) {                   \
    driver<Format>(w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride,     \
                   row_begin, row_end);                                                         \
  }

// Under HWY_ONCE, in namespace petrel::cpu: MatMul<name>, dispatching to the best target; the
// mat_mul table's row for DType::k<name> must name it.
#define PETREL_FLOAT_MATMUL_DISPATCH(name)                                                    \
  HWY_EXPORT(MatMul##name##T);                                                                \
  void MatMul##name(const void* w, size_t w_row_bytes, size_t n_in, const float* x,           \
                    size_t x_stride, size_t n_tokens, const float* bias, float* out,          \
                    size_t out_stride, size_t row_begin, size_t row_end) {                    \
    HWY_DYNAMIC_DISPATCH(MatMul##name##T)                                                     \
    (w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride, row_begin, row_end); \
  }                                                                                           \
  PETREL_TABLE_STATIC_ASSERT(FindMatMulKernel(DType::k##name) != nullptr &&                   \
                    FindMatMulKernel(DType::k##name)->f32 == &MatMul##name,                   \
                "kMatMulKernels: the row for " #name " must name MatMul" #name);

#define PETREL_QUANT_MATMUL_DISPATCH(name)                                                         \
  HWY_EXPORT(MatMul##name##T);                                                                     \
  void MatMul##name(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,                \
                    size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,           \
                    size_t out_stride, size_t row_begin, size_t row_end) {                         \
    HWY_DYNAMIC_DISPATCH(MatMul##name##T)                                                          \
    (w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end); \
  }                                                                                                \
  PETREL_TABLE_STATIC_ASSERT(FindMatMulKernel(DType::k##name) != nullptr &&                        \
                    FindMatMulKernel(DType::k##name)->quant == &MatMul##name,                      \
                "kMatMulKernels: the row for " #name " must name MatMul" #name);
