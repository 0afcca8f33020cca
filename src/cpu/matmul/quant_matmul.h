// Internal: the CPU backend's quantized-weight mat_mul entry points (see quant_matmul.cc).
#pragma once

#include <cstddef>

#include "quant/types.h"  // DType

namespace petrel::cpu {

// HostKernels::activation_type for the CPU backend: the activation block format (Q8_0, Q8_1,
// Q8_K) the kernel for weights of `w_type` multiplies with, as kMatMulKernels (matmul_table.h)
// says; kF32 for float weights (they take f32 activations) and for types without a kernel.
DType QuantActivationType(DType w_type);

// Quantizes one activation row of n floats to `act_type` (QuantActivationType's result).
void QuantizeActivation(DType act_type, const float* x, size_t n, void* out);

// quantize_activation.cc: the Highway quantizers behind QuantizeActivation (Q8_0, Q8_1, Q8_K;
// bit-identical to QuantizeRow). False for any other type.
bool QuantizeActivationRow(DType act_type, const float* x, size_t n, void* out);

// HostKernels::mat_mul_quantized for the CPU backend: the kernel kMatMulKernels names for
// `w_type`.
void MatMulQuantized(DType w_type, const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                     size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                     size_t out_stride, size_t row_begin, size_t row_end);

// HostKernels::mat_mul for quantized weights: quantizes x per token into thread-local scratch,
// then MatMulQuantized. Same results as the two-step path.
void MatMulQuantizedF32(DType w_type, const void* w, size_t w_row_bytes, size_t n_in,
                        const float* x, size_t x_stride, size_t n_tokens, const float* bias,
                        float* out, size_t out_stride, size_t row_begin, size_t row_end);

}  // namespace petrel::cpu
