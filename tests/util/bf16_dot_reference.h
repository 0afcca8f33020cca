// The arithmetic of cpu/matmul/bf16_dot.h (`vdpbf16ps` with bfloat16-rounded activations) in
// plain scalar code, one (row, token) pair at a time: what MatMulBf16Dot must equal bit for bit.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "quant/f16.h"     // F16ToF32, F32ToBF16, BF16ToF32
#include "quant/types.h"   // DType

namespace petrel::testing {

// f32 subnormals read and written as zero (the instruction's DAZ and FTZ).
inline float FlushSubnormal(float v) {
  return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
}

// A weight of `type` (F16 or BF16 bits) as the bfloat16 the dot reads, as f32.
inline float WeightAsBf16(DType type, uint16_t bits) {
  const float v = type == DType::kF16 ? BF16ToF32(F32ToBF16(F16ToF32(bits))) : BF16ToF32(bits);
  return FlushSubnormal(v);
}

// out[t * out_stride + r] for rows [row_begin, row_end) and tokens [0, n_tokens), as HostKernels'
// mat_mul with `w` rows of F16 or BF16 bits `w_row_bytes` apart.
inline void Bf16DotReference(DType type, const void* w, size_t w_row_bytes, size_t n_in,
                             const float* x, size_t x_stride, size_t n_tokens, const float* bias,
                             float* out, size_t out_stride, size_t row_begin, size_t row_end) {
  const size_t n_pad = (n_in + 31) / 32 * 32;
  std::vector<float> wb(n_pad), xb(n_pad);
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w) + r * w_row_bytes;
    for (size_t k = 0; k < n_pad; ++k) {
      uint16_t bits = 0;
      if (k < n_in) std::memcpy(&bits, row + 2 * k, 2);
      wb[k] = k < n_in ? WeightAsBf16(type, bits) : 0.0f;
    }
    for (size_t t = 0; t < n_tokens; ++t) {
      for (size_t k = 0; k < n_pad; ++k) {
        xb[k] = k < n_in ? FlushSubnormal(BF16ToF32(F32ToBF16(x[t * x_stride + k]))) : 0.0f;
      }
      float sums[16] = {};
      for (size_t block = 0; block < n_pad; block += 32) {
        for (size_t i = 0; i < 16; ++i) {
          const size_t odd = block + 2 * i + 1, even = block + 2 * i;
          // Each product is exact in f32 (8 x 8 significant bits), barring underflow.
          sums[i] = FlushSubnormal(sums[i] + FlushSubnormal(wb[odd] * xb[odd]));
          sums[i] = FlushSubnormal(sums[i] + FlushSubnormal(wb[even] * xb[even]));
        }
      }
      for (size_t half = 8; half >= 1; half /= 2) {
        for (size_t i = 0; i < half; ++i) sums[i] = sums[i] + sums[i + half];
      }
      out[t * out_stride + r] = sums[0] + (bias ? bias[r] : 0.0f);
    }
  }
}

}  // namespace petrel::testing
