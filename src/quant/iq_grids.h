// The codebooks of the IQ1/IQ2/IQ3 formats (iq_grids.cc) and the sign table of IQ2/IQ3.
#pragma once

#include <cstdint>

namespace petrel::quant {

extern const uint64_t kIQ2XXSGrid[256];
extern const uint64_t kIQ2XSGrid[512];
extern const uint64_t kIQ2SGrid[1024];
extern const uint32_t kIQ3XXSGrid[256];
extern const uint32_t kIQ3SGrid[512];
extern const uint64_t kIQ1SGrid[2048];

// IQ2/IQ3 store 7 sign bits per 8 elements; the eighth makes the count of negatives even.
constexpr uint8_t IQ2Signs(uint32_t seven_bits) {
  uint32_t parity = 0;
  for (uint32_t b = seven_bits; b; b >>= 1) parity ^= b & 1;
  return uint8_t(seven_bits | (parity << 7));
}

// The value every IQ1 grid level is shifted by, up or down per group (ggml's IQ1S_DELTA).
constexpr float kIQ1Delta = 0.125f;

}  // namespace petrel::quant
