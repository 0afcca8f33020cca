// Scalar half/bfloat16 conversions (bit manipulation, no hardware dependence).
#include "quant/f16.h"

#include <cstring>

namespace petrel {
namespace {

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

float F16ToF32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1F;
  const uint32_t mantissa = h & 0x3FF;
  if (exponent == 0) {
    // Zero or subnormal: value = mantissa * 2^-24, exact in f32.
    const float magnitude = float(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return BitsFloat(sign | 0x7F800000u | (mantissa << 13));
  return BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t F32ToF16(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits >= 0x7F800000u) {  // inf or NaN
    return sign | 0x7C00 | (abs_bits > 0x7F800000u ? 0x200 : 0);
  }
  if (abs_bits >= 0x477FF000u) return sign | 0x7C00;  // rounds to >= 65520: overflow
  if (abs_bits < 0x38800000u) {
    // Result is subnormal or zero: scale so that the integer part is the f16 mantissa; the FPU's
    // round-to-nearest-even does the rounding.
    const float scaled = BitsFloat(abs_bits) * 16777216.0f;  // 2^24
    return sign | uint16_t(static_cast<uint32_t>(__builtin_nearbyintf(scaled)));
  }
  const uint32_t exponent = (abs_bits >> 23) - 112;
  uint32_t half = (exponent << 10) | ((abs_bits >> 13) & 0x3FF);
  const uint32_t rest = abs_bits & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;  // carries into exponent correctly
  return sign | uint16_t(half);
}

float BF16ToF32(uint16_t bits) { return BitsFloat(uint32_t(bits) << 16); }

uint16_t F32ToBF16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((bits >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return uint16_t((bits + rounding) >> 16);
}

void F16ToF32Row(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = F16ToF32(in[i]);
}
void BF16ToF32Row(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = BF16ToF32(in[i]);
}
void F32ToF16Row(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = F32ToF16(in[i]);
}
void F32ToBF16Row(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = F32ToBF16(in[i]);
}

}  // namespace petrel
