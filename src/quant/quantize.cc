// The row codec table: one quantizer and dequantizer per DType, checked against the traits table.
#include "quant/quantize.h"

#include <cstring>

#include "quant/f16.h"
#include "quant/formats.h"

namespace petrel {
namespace {

using DequantizeFn = void (*)(const void* src, float* dst, size_t n);
using QuantizeFn = void (*)(const float* src, void* dst, size_t n);

struct RowCodec {
  DequantizeFn dequantize;
  QuantizeFn quantize;
};

void F32ToF32(const void* src, float* dst, size_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void F32FromF32(const float* src, void* dst, size_t n) { std::memcpy(dst, src, n * sizeof(float)); }
void F16Dequantize(const void* src, float* dst, size_t n) {
  F16ToF32Row(static_cast<const uint16_t*>(src), dst, n);
}
void F16Quantize(const float* src, void* dst, size_t n) {
  F32ToF16Row(src, static_cast<uint16_t*>(dst), n);
}
void BF16Dequantize(const void* src, float* dst, size_t n) {
  BF16ToF32Row(static_cast<const uint16_t*>(src), dst, n);
}
void BF16Quantize(const float* src, void* dst, size_t n) {
  F32ToBF16Row(src, static_cast<uint16_t*>(dst), n);
}

// Every switch lists all DTypes (no default), so a new type is a compile warning here.
RowCodec CodecOf(DType type) {
  using namespace quant;
  switch (type) {
    case DType::kF32:
      return {F32ToF32, F32FromF32};
    case DType::kF16:
      return {F16Dequantize, F16Quantize};
    case DType::kBF16:
      return {BF16Dequantize, BF16Quantize};
    case DType::kQ4_0:
      return {DequantizeQ4_0, QuantizeQ4_0};
    case DType::kQ4_1:
      return {DequantizeQ4_1, QuantizeQ4_1};
    case DType::kQ5_0:
      return {DequantizeQ5_0, QuantizeQ5_0};
    case DType::kQ5_1:
      return {DequantizeQ5_1, QuantizeQ5_1};
    case DType::kQ8_0:
      return {DequantizeQ8_0, QuantizeQ8_0};
    case DType::kQ8_1:
      return {DequantizeQ8_1, QuantizeQ8_1};
    case DType::kQ2_K:
      return {DequantizeQ2_K, QuantizeQ2_K};
    case DType::kQ3_K:
      return {DequantizeQ3_K, QuantizeQ3_K};
    case DType::kQ4_K:
      return {DequantizeQ4_K, QuantizeQ4_K};
    case DType::kQ5_K:
      return {DequantizeQ5_K, QuantizeQ5_K};
    case DType::kQ6_K:
      return {DequantizeQ6_K, QuantizeQ6_K};
    case DType::kQ8_K:
      return {DequantizeQ8_K, QuantizeQ8_K};
    case DType::kIQ4_NL:
      return {DequantizeIQ4_NL, QuantizeIQ4_NL};
    case DType::kIQ4_XS:
      return {DequantizeIQ4_XS, QuantizeIQ4_XS};
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
    case DType::kF64:
    case DType::kCount:
      break;
  }
  return {nullptr, nullptr};
}

}  // namespace

bool CanDequantize(DType type) { return CodecOf(type).dequantize != nullptr; }
bool CanQuantize(DType type) { return CodecOf(type).quantize != nullptr; }

bool DequantizeRow(DType type, const void* src, float* dst, size_t n) {
  const RowCodec codec = CodecOf(type);
  if (!codec.dequantize || n % Traits(type).block_elems != 0) return false;
  codec.dequantize(src, dst, n);
  return true;
}

bool QuantizeRow(DType type, const float* src, void* dst, size_t n) {
  const RowCodec codec = CodecOf(type);
  if (!codec.quantize || n % Traits(type).block_elems != 0) return false;
  codec.quantize(src, dst, n);
  return true;
}

}  // namespace petrel
