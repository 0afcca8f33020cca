// Internal: the IQ3_XXS and IQ3_S encoders (iq3_quantize.cc), as ggml's `quantize_iq3_xxs` and
// `quantize_iq3_s` write them, for the codec table. `n` is a whole row of 256-blocks;
// `importance` (one value per element) as in formats.h.
#pragma once

#include <cstddef>

namespace petrel::quant {

// IQ3_XXS is written only with an importance matrix (a `NeedsImportance` row), as llama-quantize
// requires one for it.
void QuantizeIQ3_XXSWeighted(const float* src, void* dst, size_t n, const float* importance);

// IQ3_S works with and without one.
void QuantizeIQ3_S(const float* src, void* dst, size_t n);
void QuantizeIQ3_SWeighted(const float* src, void* dst, size_t n, const float* importance);

}  // namespace petrel::quant
