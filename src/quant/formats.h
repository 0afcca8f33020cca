// Internal: the per-format scalar quantizers and dequantizers behind quant/quantize.h.
// `n` is a whole number of blocks; callers (quantize.cc) check it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace petrel::quant {

#define PETREL_QUANT_FORMAT(name)                               \
  void Dequantize##name(const void* src, float* dst, size_t n); \
  void Quantize##name(const float* src, void* dst, size_t n);
PETREL_QUANT_FORMAT(Q4_0)
PETREL_QUANT_FORMAT(Q4_1)
PETREL_QUANT_FORMAT(Q5_0)
PETREL_QUANT_FORMAT(Q5_1)
PETREL_QUANT_FORMAT(Q8_0)
PETREL_QUANT_FORMAT(Q8_1)
PETREL_QUANT_FORMAT(Q2_K)
PETREL_QUANT_FORMAT(Q3_K)
PETREL_QUANT_FORMAT(Q4_K)
PETREL_QUANT_FORMAT(Q5_K)
PETREL_QUANT_FORMAT(Q6_K)
PETREL_QUANT_FORMAT(Q8_K)
PETREL_QUANT_FORMAT(IQ4_NL)
PETREL_QUANT_FORMAT(IQ4_XS)
#undef PETREL_QUANT_FORMAT

// ggml's `nearest_int`: round half to even through the float mantissa (valid for |x| < 2^22).
inline int NearestInt(float value) {
  const float shifted = value + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  return (bits & 0x007fffff) - 0x00400000;
}

// Groups with a largest magnitude below this are treated as all zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// The scale searches of ggml's K-quant reference quantizers (k_quant_search.cc).
float MakeQxQuants(int n, int nmax, const float* x, int8_t* levels, int rmse_type);
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* levels,
                     float* the_min, uint8_t* levels_aux, float rmin, float rdelta, int nstep,
                     bool use_mad);
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* levels);

}  // namespace petrel::quant
