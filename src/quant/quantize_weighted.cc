// The importance-weighted row encoders by type; everything else goes to QuantizeRow.
#include "quant/quantize_weighted.h"

#include "quant/formats.h"
#include "quant/quantize.h"

namespace petrel {
namespace {

using WeightedFn = void (*)(const float* src, void* dst, size_t n, const float* importance);

WeightedFn WeightedOf(DType type) {
  using namespace quant;
  switch (type) {
    case DType::kQ4_0:
      return QuantizeQ4_0Weighted;
    case DType::kQ4_1:
      return QuantizeQ4_1Weighted;
    case DType::kQ5_0:
      return QuantizeQ5_0Weighted;
    case DType::kQ5_1:
      return QuantizeQ5_1Weighted;
    case DType::kQ2_K:
      return QuantizeQ2_KWeighted;
    case DType::kQ3_K:
      return QuantizeQ3_KWeighted;
    case DType::kQ4_K:
      return QuantizeQ4_KWeighted;
    case DType::kQ5_K:
      return QuantizeQ5_KWeighted;
    case DType::kQ6_K:
      return QuantizeQ6_KWeighted;
    case DType::kIQ4_NL:
      return QuantizeIQ4_NLWeighted;
    case DType::kIQ4_XS:
      return QuantizeIQ4_XSWeighted;
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ8_1:
    case DType::kQ8_K:
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
    case DType::kF64:
    case DType::kCount:
      break;  // 8-bit and float types lose too little for a weighted search to matter
  }
  return nullptr;
}

}  // namespace

bool TakesImportance(DType type) { return WeightedOf(type) != nullptr; }

bool QuantizeRowWeighted(DType type, const float* src, void* dst, size_t n,
                         const float* importance) {
  const WeightedFn weighted = WeightedOf(type);
  if (!importance || !weighted) return QuantizeRow(type, src, dst, n);
  if (n % Traits(type).block_elems != 0) return false;
  weighted(src, dst, n, importance);
  return true;
}

}  // namespace petrel
