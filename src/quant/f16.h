// Scalar IEEE half and bfloat16 conversions: the bit-exact ground truth the SIMD kernels must match.
#pragma once

#include <cstddef>
#include <cstdint>

namespace petrel {

float F16ToF32(uint16_t bits);
uint16_t F32ToF16(float value);  // round to nearest even, overflow to inf, NaN kept
float BF16ToF32(uint16_t bits);
uint16_t F32ToBF16(float value);  // round to nearest even, NaN kept quiet

void F16ToF32Row(const uint16_t* in, float* out, size_t n);
void BF16ToF32Row(const uint16_t* in, float* out, size_t n);
void F32ToF16Row(const float* in, uint16_t* out, size_t n);
void F32ToBF16Row(const float* in, uint16_t* out, size_t n);

}  // namespace petrel
