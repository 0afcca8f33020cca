// MXFP4 (OCP microscaling FP4): 32 E2M1 values sharing one E8M0 power-of-two scale, as ggml
// defines it: kMXFP4Values holds the E2M1 values doubled, so the scale is taken at half.
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/formats.h"

namespace petrel::quant {
namespace {

// Half of the E8M0 scale 2^(e - 127), built from bits as ggml's GGML_E8M0_TO_FP32_HALF does:
// e = 0 and 1 give the subnormals 2^-128 and 2^-127.
float E8M0ToF32Half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// The index of the value nearest to x at scale `d` (the first of equals, so zero is index 0).
int BestMXFP4Index(float x, float d) {
  int best = 0;
  float best_err = std::fabs(float(kMXFP4Values[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(float(kMXFP4Values[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

void DequantizeMXFP4(const void* src, float* dst, size_t n) {
  const BlockMXFP4* blocks = static_cast<const BlockMXFP4*>(src);
  for (size_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = E8M0ToF32Half(blocks[i].e);
    for (size_t j = 0; j < kQK / 2; ++j) {
      dst[j] = float(kMXFP4Values[blocks[i].qs[j] & 0xF]) * d;
      dst[j + kQK / 2] = float(kMXFP4Values[blocks[i].qs[j] >> 4]) * d;
    }
  }
}

void QuantizeMXFP4(const float* src, void* dst, size_t n) {
  BlockMXFP4* blocks = static_cast<BlockMXFP4*>(dst);
  for (size_t i = 0; i < n / kQK; ++i, src += kQK) {
    float amax = 0.0f;
    for (size_t j = 0; j < kQK; ++j) {
      if (amax < std::fabs(src[j])) amax = std::fabs(src[j]);
    }
    // The exponent that puts amax in [4, 8) times the scale: E2M1's largest value is 6.
    const uint8_t e =
        amax > 0.0f ? uint8_t(int(std::floor(std::log2(amax)) - 2.0f + 127.0f)) : uint8_t{0};
    const float d = E8M0ToF32Half(e);
    blocks[i].e = e;
    for (size_t j = 0; j < kQK / 2; ++j) {
      const int low = BestMXFP4Index(src[j], d);
      const int high = BestMXFP4Index(src[j + kQK / 2], d);
      blocks[i].qs[j] = uint8_t(low | (high << 4));
    }
  }
}

}  // namespace petrel::quant
