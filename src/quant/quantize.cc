// Row quantization and dequantization through the codec table (codec_table.h).
#include "quant/quantize.h"

#include <cstring>

#include "quant/codec_table.h"
#include "quant/f16.h"

namespace petrel {
namespace quant {

void DequantizeF32(const void* src, float* dst, size_t n) {
  std::memcpy(dst, src, n * sizeof(float));
}
void QuantizeF32(const float* src, void* dst, size_t n) {
  std::memcpy(dst, src, n * sizeof(float));
}
void DequantizeF16(const void* src, float* dst, size_t n) {
  F16ToF32Row(static_cast<const uint16_t*>(src), dst, n);
}
void QuantizeF16(const float* src, void* dst, size_t n) {
  F32ToF16Row(src, static_cast<uint16_t*>(dst), n);
}
void DequantizeBF16(const void* src, float* dst, size_t n) {
  BF16ToF32Row(static_cast<const uint16_t*>(src), dst, n);
}
void QuantizeBF16(const float* src, void* dst, size_t n) {
  F32ToBF16Row(src, static_cast<uint16_t*>(dst), n);
}

}  // namespace quant

bool CanDequantize(DType type) { return quant::FindCodec(type) != nullptr; }
bool CanQuantize(DType type) {
  const quant::QuantCodec* codec = quant::FindCodec(type);
  return codec && codec->quantize;
}

bool DequantizeRow(DType type, const void* src, float* dst, size_t n) {
  const quant::QuantCodec* codec = quant::FindCodec(type);
  if (!codec || n % Traits(type).block_elems != 0) return false;
  codec->dequantize(src, dst, n);
  return true;
}

bool QuantizeRow(DType type, const float* src, void* dst, size_t n) {
  const quant::QuantCodec* codec = quant::FindCodec(type);
  if (!codec || !codec->quantize || n % Traits(type).block_elems != 0) return false;
  codec->quantize(src, dst, n);
  return true;
}

}  // namespace petrel
