// Internal: the dispatching entry point of each Highway TU, which kernels.cc puts in the table.
// Each has the signature of its HostKernels field (mat_mul is split per weight type, and the
// mat_mul table, matmul_table.h, names the one for each).
#pragma once

#include <cstddef>

#include "core/graph/ops.h"          // RopeStyle
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

// matmul_q*.cc, matmul_iq*.cc, matmul_tq*.cc, matmul_mxfp4.cc: `w` holds rows of blocks of the format in the name; `xq` holds
// n_tokens rows of activation blocks (Q8_0, Q8_1 or Q8_K, as kMatMulKernels in matmul_table.h
// says), `xq_row_bytes` apart.
#define PETREL_QUANT_MATMUL(name)                                                           \
  void MatMul##name(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,         \
                    size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,    \
                    size_t out_stride, size_t row_begin, size_t row_end);
PETREL_QUANT_MATMUL(Q4_0)
PETREL_QUANT_MATMUL(Q4_1)
PETREL_QUANT_MATMUL(Q5_0)
PETREL_QUANT_MATMUL(Q5_1)
PETREL_QUANT_MATMUL(Q8_0)
PETREL_QUANT_MATMUL(IQ4_NL)
PETREL_QUANT_MATMUL(Q2_K)
PETREL_QUANT_MATMUL(Q3_K)
PETREL_QUANT_MATMUL(Q4_K)
PETREL_QUANT_MATMUL(Q5_K)
PETREL_QUANT_MATMUL(Q6_K)
PETREL_QUANT_MATMUL(IQ4_XS)
PETREL_QUANT_MATMUL(IQ1_S)
PETREL_QUANT_MATMUL(IQ1_M)
PETREL_QUANT_MATMUL(IQ2_XXS)
PETREL_QUANT_MATMUL(IQ2_XS)
PETREL_QUANT_MATMUL(IQ2_S)
PETREL_QUANT_MATMUL(IQ3_XXS)
PETREL_QUANT_MATMUL(IQ3_S)
PETREL_QUANT_MATMUL(TQ1_0)
PETREL_QUANT_MATMUL(TQ2_0)
PETREL_QUANT_MATMUL(MXFP4)
PETREL_QUANT_MATMUL(Q1_0)
PETREL_QUANT_MATMUL(Q2_0)
#undef PETREL_QUANT_MATMUL

// convert.cc
void RowToF32(DType type, const void* row, size_t n, float* out);
void RowFromF32(DType type, const float* row, size_t n, void* out);

// rms_norm.cc
void RmsNorm(const float* x, const float* weight, size_t n, float eps, float* out);

// layer_norm.cc
void LayerNorm(const float* x, const float* weight, const float* bias, size_t n, float eps,
               float* out);
void Gelu(const float* x, size_t n, float* out);

// rope.cc
void Rope(float* x, size_t n_heads, size_t head_dim, size_t rot_dims, const float* cos,
          const float* sin, RopeStyle style);

// attention.cc
void Attention(const AttentionArgs& args, size_t head_begin, size_t head_end);

// elementwise.cc
void SiluMul(const float* gate, const float* up, size_t n, float* out);
void Add(const float* a, const float* b, size_t n, float* out);
void GeluMul(const float* gate, const float* up, size_t n, float* out);
void Scale(const float* x, float factor, size_t n, float* out);
void Softcap(const float* x, float cap, size_t n, float* out);

}  // namespace petrel::cpu
