// Quantization weighted by an importance matrix (`petrel quantize --imatrix`): the low-bit types'
// searches minimise each element's squared error times the importance of its input column.
#pragma once

#include <cstddef>

#include "quant/types.h"  // DType

namespace petrel {

// Whether QuantizeRowWeighted uses the importance for `type`: the types whose ggml quantizer
// takes `quant_weights` (the K-quants, the IQ types, Q4_0, Q4_1, Q5_0, Q5_1). Others (Q8_0,
// the float types) ignore it.
bool TakesImportance(DType type);
// Whether `type` can only be written with an importance matrix (the IQ1/IQ2 grids and IQ3_XXS,
// as llama-quantize requires one for them): QuantizeRow refuses it, QuantizeRowWeighted needs a
// non-null `importance`.
bool NeedsImportance(DType type);
// Whether QuantizeRowWeighted can write `type` given an importance matrix.
bool CanQuantizeWithImportance(DType type);

// Encodes `n` floats (one whole row) as `type`; `importance` holds `n` non-negative values, one
// per column. A null `importance`, or a type that does not take it, gives exactly QuantizeRow's
// bytes. Returns false as QuantizeRow does (and for a null `importance` where NeedsImportance).
bool QuantizeRowWeighted(DType type, const float* src, void* dst, size_t n,
                         const float* importance);

}  // namespace petrel
