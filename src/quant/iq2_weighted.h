// Internal: the importance-matrix quantizers of the IQ2 and IQ1 grids (iq2_weighted.cc,
// iq1_weighted.cc), byte-identical to ggml's `quantize_iq2_xxs`, `quantize_iq2_xs`,
// `quantize_iq2_s`, `quantize_iq1_s` and `quantize_iq1_m`. These formats have no usable
// quantizer without an importance matrix: `importance` (n values, one per column, non-negative)
// must not be null. `n` is a whole row, a multiple of 256.
#pragma once

#include <cstddef>

namespace petrel::quant {

void QuantizeIQ2_XXSWeighted(const float* src, void* dst, size_t n, const float* importance);
void QuantizeIQ2_XSWeighted(const float* src, void* dst, size_t n, const float* importance);
void QuantizeIQ2_SWeighted(const float* src, void* dst, size_t n, const float* importance);
void QuantizeIQ1_SWeighted(const float* src, void* dst, size_t n, const float* importance);
void QuantizeIQ1_MWeighted(const float* src, void* dst, size_t n, const float* importance);

}  // namespace petrel::quant
