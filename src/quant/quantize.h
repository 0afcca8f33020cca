// Table-driven scalar quantization and dequantization of rows: the ground truth for every kernel.
#pragma once

#include <cstddef>

#include "quant/types.h"  // DType

namespace petrel {

// Whether DequantizeRow / QuantizeRow handle `type` (every float and block type but the integers).
bool CanDequantize(DType type);
bool CanQuantize(DType type);

// Decodes `n` elements (a whole number of blocks) of `type` at `src` into f32, bit-exact with
// ggml's `to_float`. Returns false for types it cannot decode or a partial block.
bool DequantizeRow(DType type, const void* src, float* dst, size_t n);

// Encodes `n` floats as `type` with ggml's reference quantizer (`quantize_row_*_ref`, and the
// no-importance-matrix search of the K-quants and IQ4). Returns false as DequantizeRow does.
bool QuantizeRow(DType type, const float* src, void* dst, size_t n);

}  // namespace petrel
