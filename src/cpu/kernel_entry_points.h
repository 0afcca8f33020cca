// Internal: the dispatching entry point of each Highway TU, which kernels.cc puts in the table.
// Each has the signature of its HostKernels field (mat_mul is split per weight type).
#pragma once

#include <cstddef>

#include "core/ops.h"          // RopeStyle
#include "cpu/kernel_table.h"  // AttentionArgs
#include "quant/types.h"       // DType

namespace petrel::cpu {

// matmul_{f32,f16,bf16}.cc: `w` holds rows of float, IEEE half or bfloat16.
void MatMulF32(const void* w, size_t w_row_bytes, size_t n_in, const float* x, size_t x_stride,
               size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
               size_t row_end);
void MatMulF16(const void* w, size_t w_row_bytes, size_t n_in, const float* x, size_t x_stride,
               size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
               size_t row_end);
void MatMulBF16(const void* w, size_t w_row_bytes, size_t n_in, const float* x, size_t x_stride,
                size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
                size_t row_end);

// convert.cc
void RowToF32(DType type, const void* row, size_t n, float* out);
void RowFromF32(DType type, const float* row, size_t n, void* out);

// rms_norm.cc
void RmsNorm(const float* x, const float* weight, size_t n, float eps, float* out);

// rope.cc
void Rope(float* x, size_t n_heads, size_t head_dim, size_t rot_dims, const float* cos,
          const float* sin, RopeStyle style);

// attention.cc
void Attention(const AttentionArgs& args, size_t head_begin, size_t head_end);

// elementwise.cc
void SiluMul(const float* gate, const float* up, size_t n, float* out);
void Add(const float* a, const float* b, size_t n, float* out);

}  // namespace petrel::cpu
