// Internal: the mat_mul of F16 and BF16 weights on AVX512-BF16's `vdpbf16ps`, with activations
// rounded to bfloat16: the kernel the `--bf16-dot on` table (CpuKernelsWithBf16Dot) runs.
//
// The arithmetic, which Bf16DotReference (tests/util) restates in scalar code, for every
// (row, token) pair, whatever the batch or the row range (so it is batch-invariant):
//   - each weight is a bfloat16: BF16 as stored, F16 rounded to nearest even (F16 has 11
//     significant bits, bfloat16 8); each activation is rounded to nearest even bfloat16;
//   - both rows are zero-padded to a multiple of 32 elements; 16 f32 sums start at zero and,
//     block of 32 by block, sum i adds w[2i+1] * x[2i+1] and then w[2i] * x[2i], each product
//     exact and each addition rounded to nearest even, bfloat16 and f32 subnormals read and
//     written as zero (`vdpbf16ps`, as Intel documents it and Zen 5 computes it);
//   - the 16 sums are reduced as s[i] + s[i + 8], then + [i + 4], then + [i + 2], then lane 0
//     + lane 1; the bias, when given, is added last.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/types.h"  // DType

namespace petrel::cpu {

// Whether this CPU has AVX512-BF16 (CPUID leaf 7, subleaf 1, EAX bit 5) and Highway's AVX3
// target is enabled (the OS saves the 512-bit state and PETREL_CPU_TARGET does not cap it
// below). Checked once.
bool Bf16DotSupported();

// The HostKernels::mat_mul contract for `w_type` kF16 or kBF16 with the arithmetic above; only
// when Bf16DotSupported().
void MatMulBf16Dot(DType w_type, const void* w, size_t w_row_bytes, size_t n_in, const float* x,
                   size_t x_stride, size_t n_tokens, const float* bias, float* out,
                   size_t out_stride, size_t row_begin, size_t row_end);

// The same in two steps, as HostBackend runs quantized weights: each token's activations
// rounded once per op (RoundRowToBf16: n bfloat16, nearest even), then the rows split over
// threads (MatMulBf16DotRounded: HostKernels::mat_mul_quantized's contract with bfloat16
// activation rows `xb_row_bytes` apart). Rounded per call instead, for each 48-row chunk of a
// 512-token prompt, tinyllama BF16 pp512 ran at 0.86x the f32 path. Only when Bf16DotSupported().
void RoundRowToBf16(const float* x, size_t n, uint16_t* out);
void MatMulBf16DotRounded(DType w_type, const void* w, size_t w_row_bytes, size_t n_in,
                          const void* xb, size_t xb_row_bytes, size_t n_tokens, const float* bias,
                          float* out, size_t out_stride, size_t row_begin, size_t row_end);

}  // namespace petrel::cpu
