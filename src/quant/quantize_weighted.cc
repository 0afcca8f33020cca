// Importance-weighted row encoding through the codec table (codec_table.h).
#include "quant/quantize_weighted.h"

#include "quant/codec_table.h"
#include "quant/quantize.h"

namespace petrel {

bool TakesImportance(DType type) {
  const quant::QuantCodec* codec = quant::FindCodec(type);
  return codec && codec->quantize_weighted;
}

bool NeedsImportance(DType type) {
  const quant::QuantCodec* codec = quant::FindCodec(type);
  return codec && codec->needs_importance;
}

bool CanQuantizeWithImportance(DType type) {
  const quant::QuantCodec* codec = quant::FindCodec(type);
  return codec && (codec->quantize || codec->quantize_weighted);
}

bool QuantizeRowWeighted(DType type, const float* src, void* dst, size_t n,
                         const float* importance) {
  const quant::QuantCodec* codec = quant::FindCodec(type);
  if (!codec || !importance || !codec->quantize_weighted) return QuantizeRow(type, src, dst, n);
  if (n % Traits(type).block_elems != 0) return false;
  codec->quantize_weighted(src, dst, n, importance);
  return true;
}

}  // namespace petrel
