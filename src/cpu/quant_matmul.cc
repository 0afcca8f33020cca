// The CPU backend's quantized mat_mul: which activation format each weight format multiplies
// with, activation quantization, and dispatch to the per-format Highway TUs.
#include "cpu/quant_matmul.h"

#include <vector>

#include "core/base/status.h"              // PETREL_CHECK
#include "cpu/kernel_entry_points.h"  // MatMulQ4_0, ...
#include "quant/quantize.h"           // QuantizeRow

namespace petrel::cpu {

DType QuantActivationType(DType w_type) {
  switch (w_type) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0:
    case DType::kIQ4_NL:
      return DType::kQ8_0;
    case DType::kQ4_1:  // formats with a min need the activation block sums Q8_1 carries
    case DType::kQ5_1:
      return DType::kQ8_1;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS:
      return DType::kQ8_K;
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_1:
    case DType::kQ8_K:
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
    case DType::kF64:
    case DType::kCount:
      break;
  }
  return DType::kF32;
}

void QuantizeActivation(DType act_type, const float* x, size_t n, void* out) {
  // SIMD, bit-identical to the scalar reference quantizer (QuantizeRow), which the tests check.
  if (QuantizeActivationRow(act_type, x, n, out)) return;
  PETREL_CHECK(QuantizeRow(act_type, x, out, n));
}

void MatMulQuantized(DType w_type, const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                     size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                     size_t out_stride, size_t row_begin, size_t row_end) {
  using Fn = void (*)(const void*, size_t, size_t, const void*, size_t, size_t, const float*,
                      float*, size_t, size_t, size_t);
  Fn fn = nullptr;
  switch (w_type) {
    case DType::kQ4_0:
      fn = MatMulQ4_0;
      break;
    case DType::kQ4_1:
      fn = MatMulQ4_1;
      break;
    case DType::kQ5_0:
      fn = MatMulQ5_0;
      break;
    case DType::kQ5_1:
      fn = MatMulQ5_1;
      break;
    case DType::kQ8_0:
      fn = MatMulQ8_0;
      break;
    case DType::kIQ4_NL:
      fn = MatMulIQ4_NL;
      break;
    case DType::kQ2_K:
      fn = MatMulQ2_K;
      break;
    case DType::kQ3_K:
      fn = MatMulQ3_K;
      break;
    case DType::kQ4_K:
      fn = MatMulQ4_K;
      break;
    case DType::kQ5_K:
      fn = MatMulQ5_K;
      break;
    case DType::kQ6_K:
      fn = MatMulQ6_K;
      break;
    case DType::kIQ4_XS:
      fn = MatMulIQ4_XS;
      break;
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_1:
    case DType::kQ8_K:
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
    case DType::kF64:
    case DType::kCount:
      break;
  }
  PETREL_CHECK(fn != nullptr && "cpu mat_mul_quantized: not a quantized weight type");
  fn(w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride, row_begin, row_end);
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
