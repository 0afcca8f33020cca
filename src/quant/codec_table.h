// Internal: the quant layer's row per weight type: how a row of it is decoded, encoded, and
// encoded against an importance matrix. quantize.cc and quantize_weighted.cc read only this table,
// so a new block format is its codec functions (formats.h) and one row here; a type without a row
// is one that petrel cannot decode or write ("unsupported" where it is asked for).
#pragma once

#include <cstddef>

#include "quant/formats.h"
#include "quant/iq2_weighted.h"
#include "quant/iq3_quantize.h"
#include "quant/types.h"

namespace petrel::quant {

using DequantizeFn = void (*)(const void* src, float* dst, size_t n);
using QuantizeFn = void (*)(const float* src, void* dst, size_t n);
using WeightedFn = void (*)(const float* src, void* dst, size_t n, const float* importance);

// Plain-type codecs (f16.cc, codec_table.cc).
void DequantizeF32(const void* src, float* dst, size_t n);
void QuantizeF32(const float* src, void* dst, size_t n);
void DequantizeF16(const void* src, float* dst, size_t n);
void QuantizeF16(const float* src, void* dst, size_t n);
void DequantizeBF16(const void* src, float* dst, size_t n);
void QuantizeBF16(const float* src, void* dst, size_t n);

struct QuantCodec {
  DType type;
  DequantizeFn dequantize;  // bit-exact with ggml's to_float
  // ggml's reference quantizer without an importance matrix; nullptr where the format has none
  // that is usable (the types whose search needs one: `needs_importance`).
  QuantizeFn quantize;
  // The search weighted by an importance matrix; nullptr where the type ignores one (the 8-bit
  // and float types lose too little for a weighted search to matter).
  WeightedFn quantize_weighted;
  // Whether writing the type needs an importance matrix (the IQ1/IQ2 grids: without one their
  // search has nothing to choose grid points by).
  bool needs_importance;
};

constexpr QuantCodec Plain(DType type, DequantizeFn dequantize, QuantizeFn quantize) {
  return {type, dequantize, quantize, nullptr, false};
}
constexpr QuantCodec Weighted(DType type, DequantizeFn dequantize, QuantizeFn quantize,
                              WeightedFn weighted) {
  return {type, dequantize, quantize, weighted, false};
}
constexpr QuantCodec NeedsImportance(DType type, DequantizeFn dequantize, WeightedFn weighted) {
  return {type, dequantize, nullptr, weighted, true};
}
constexpr QuantCodec DecodeOnly(DType type, DequantizeFn dequantize) {
  return {type, dequantize, nullptr, nullptr, false};
}

inline constexpr QuantCodec kQuantCodecs[] = {
    Plain(DType::kF32, DequantizeF32, QuantizeF32),
    Plain(DType::kF16, DequantizeF16, QuantizeF16),
    Plain(DType::kBF16, DequantizeBF16, QuantizeBF16),
    Weighted(DType::kQ4_0, DequantizeQ4_0, QuantizeQ4_0, QuantizeQ4_0Weighted),
    Weighted(DType::kQ4_1, DequantizeQ4_1, QuantizeQ4_1, QuantizeQ4_1Weighted),
    Weighted(DType::kQ5_0, DequantizeQ5_0, QuantizeQ5_0, QuantizeQ5_0Weighted),
    Weighted(DType::kQ5_1, DequantizeQ5_1, QuantizeQ5_1, QuantizeQ5_1Weighted),
    Plain(DType::kQ8_0, DequantizeQ8_0, QuantizeQ8_0),
    Plain(DType::kQ8_1, DequantizeQ8_1, QuantizeQ8_1),
    Weighted(DType::kQ2_K, DequantizeQ2_K, QuantizeQ2_K, QuantizeQ2_KWeighted),
    Weighted(DType::kQ3_K, DequantizeQ3_K, QuantizeQ3_K, QuantizeQ3_KWeighted),
    Weighted(DType::kQ4_K, DequantizeQ4_K, QuantizeQ4_K, QuantizeQ4_KWeighted),
    Weighted(DType::kQ5_K, DequantizeQ5_K, QuantizeQ5_K, QuantizeQ5_KWeighted),
    Weighted(DType::kQ6_K, DequantizeQ6_K, QuantizeQ6_K, QuantizeQ6_KWeighted),
    Plain(DType::kQ8_K, DequantizeQ8_K, QuantizeQ8_K),
    Weighted(DType::kIQ4_NL, DequantizeIQ4_NL, QuantizeIQ4_NL, QuantizeIQ4_NLWeighted),
    Weighted(DType::kIQ4_XS, DequantizeIQ4_XS, QuantizeIQ4_XS, QuantizeIQ4_XSWeighted),
    NeedsImportance(DType::kIQ1_S, DequantizeIQ1_S, QuantizeIQ1_SWeighted),
    NeedsImportance(DType::kIQ1_M, DequantizeIQ1_M, QuantizeIQ1_MWeighted),
    NeedsImportance(DType::kIQ2_XXS, DequantizeIQ2_XXS, QuantizeIQ2_XXSWeighted),
    NeedsImportance(DType::kIQ2_XS, DequantizeIQ2_XS, QuantizeIQ2_XSWeighted),
    NeedsImportance(DType::kIQ2_S, DequantizeIQ2_S, QuantizeIQ2_SWeighted),
    NeedsImportance(DType::kIQ3_XXS, DequantizeIQ3_XXS, QuantizeIQ3_XXSWeighted),
    Weighted(DType::kIQ3_S, DequantizeIQ3_S, QuantizeIQ3_S, QuantizeIQ3_SWeighted),
    Plain(DType::kTQ1_0, DequantizeTQ1_0, QuantizeTQ1_0),
    Plain(DType::kTQ2_0, DequantizeTQ2_0, QuantizeTQ2_0),
    Plain(DType::kMXFP4, DequantizeMXFP4, QuantizeMXFP4),
    Plain(DType::kQ1_0, DequantizeQ1_0, QuantizeQ1_0),
    Plain(DType::kQ2_0, DequantizeQ2_0, QuantizeQ2_0),
};

// The row for `type`, or nullptr. A linear search of a few rows.
constexpr const QuantCodec* FindCodec(DType type) {
  for (const QuantCodec& codec : kQuantCodecs) {
    if (codec.type == type) return &codec;
  }
  return nullptr;
}

constexpr bool EachCodecTypeOnce() {
  for (const QuantCodec& codec : kQuantCodecs) {
    if (codec.type >= DType::kCount || FindCodec(codec.type) != &codec) return false;
    if (!codec.dequantize) return false;
    if (codec.needs_importance != (codec.quantize == nullptr && codec.quantize_weighted)) {
      return false;
    }
  }
  return true;
}
// GCC cannot evaluate the function-pointer comparisons at compile time under the sanitizers.
#if !defined(__SANITIZE_ADDRESS__)
static_assert(EachCodecTypeOnce(),
              "kQuantCodecs: one row per type, each with a decoder, and a type without a plain "
              "quantizer exactly when it needs an importance matrix");
#endif

}  // namespace petrel::quant
