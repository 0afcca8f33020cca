// The CPU backend's quantized mat_mul: activation quantization and dispatch to the per-format
// Highway TUs, both through the mat_mul table (matmul_table.h).
#include "cpu/matmul/quant_matmul.h"

#include <vector>

#include "core/base/status.h"  // PETREL_CHECK
#include "cpu/matmul/matmul_table.h"  // FindMatMulKernel
#include "quant/quantize.h"    // QuantizeRow

namespace petrel::cpu {

DType QuantActivationType(DType w_type) {
  const MatMulKernel* kernel = FindMatMulKernel(w_type);
  return kernel != nullptr ? kernel->activation : DType::kF32;
}

void QuantizeActivation(DType act_type, const float* x, size_t n, void* out) {
  // SIMD, bit-identical to the scalar reference quantizer (QuantizeRow), which the tests check.
  if (QuantizeActivationRow(act_type, x, n, out)) return;
  PETREL_CHECK(QuantizeRow(act_type, x, out, n));
}

void MatMulQuantized(DType w_type, const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                     size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                     size_t out_stride, size_t row_begin, size_t row_end) {
  const MatMulKernel* kernel = FindMatMulKernel(w_type);
  PETREL_CHECK(kernel != nullptr && kernel->quant != nullptr &&
               "cpu mat_mul_quantized: not a quantized weight type");
  kernel->quant(w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin,
                row_end);
}

void MatMulQuantizedF32(DType w_type, const void* w, size_t w_row_bytes, size_t n_in,
                        const float* x, size_t x_stride, size_t n_tokens, const float* bias,
                        float* out, size_t out_stride, size_t row_begin, size_t row_end) {
  const DType act_type = QuantActivationType(w_type);
  const size_t xq_row_bytes = *RowBytes(act_type, n_in);
  // Per-thread scratch, grown to the largest batch seen and then reused (no allocation in steady
  // state). HostBackend quantizes once per op instead; this path serves direct callers.
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < n_tokens * xq_row_bytes) scratch.resize(n_tokens * xq_row_bytes);
  for (size_t t = 0; t < n_tokens; ++t) {
    QuantizeActivation(act_type, x + t * x_stride, n_in, scratch.data() + t * xq_row_bytes);
  }
  MatMulQuantized(w_type, w, w_row_bytes, n_in, scratch.data(), xq_row_bytes, n_tokens, bias, out,
                  out_stride, row_begin, row_end);
}

}  // namespace petrel::cpu
