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
PETREL_QUANT_FORMAT(TQ1_0)  // ternary_quants.cc
PETREL_QUANT_FORMAT(TQ2_0)
PETREL_QUANT_FORMAT(Q1_0)
PETREL_QUANT_FORMAT(Q2_0)
PETREL_QUANT_FORMAT(MXFP4)  // mxfp4.cc
#undef PETREL_QUANT_FORMAT

// Decoders of the IQ1/IQ2/IQ3 formats (iq1_quants.cc, iq2_quants.cc, iq3_quants.cc); their
// quantizers are the importance-matrix searches.
#define PETREL_DECODE_FORMAT(name) void Dequantize##name(const void* src, float* dst, size_t n);
PETREL_DECODE_FORMAT(IQ1_S)
PETREL_DECODE_FORMAT(IQ1_M)
PETREL_DECODE_FORMAT(IQ2_XXS)
PETREL_DECODE_FORMAT(IQ2_XS)
PETREL_DECODE_FORMAT(IQ2_S)
PETREL_DECODE_FORMAT(IQ3_XXS)
PETREL_DECODE_FORMAT(IQ3_S)
#undef PETREL_DECODE_FORMAT

// ggml's `nearest_int`: round half to even through the float mantissa (valid for |x| < 2^22).
inline int NearestInt(float value) {
  const float shifted = value + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof(bits));
  return (bits & 0x007fffff) - 0x00400000;
}

// Groups with a largest magnitude below this are treated as all zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// The scale searches of ggml's K-quant reference quantizers (k_quant_search.cc). `weights`, when
// given, replaces the error weighting of `rmse_type` (ggml's `quant_weights` argument).
float MakeQxQuants(int n, int nmax, const float* x, int8_t* levels, int rmse_type,
                   const float* weights = nullptr);
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* levels,
                     float* the_min, uint8_t* levels_aux, float rmin, float rdelta, int nstep,
                     bool use_mad);
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* levels);
// Non-negative values (sub-block scales or mins) as levels in [0, nmax] with one scale, fitted to
// minimise the `weights`-weighted error (ggml's `make_qp_quants`): the importance-matrix path
// quantizes the K-quants' sub-block scales with it instead of rounding against the maximum.
float MakeQpQuants(int n, int nmax, const float* x, uint8_t* levels, const float* weights);

// The importance-matrix quantizers (ggml's `quantize_row_*_impl` with `quant_weights`):
// `importance` holds one non-negative value per element of the row (the mean squared activation
// of its input column), and the searches minimise the error weighted by it. `n` is a whole row.
#define PETREL_WEIGHTED_FORMAT(name) \
  void Quantize##name##Weighted(const float* src, void* dst, size_t n, const float* importance);
PETREL_WEIGHTED_FORMAT(Q4_0)
PETREL_WEIGHTED_FORMAT(Q4_1)
PETREL_WEIGHTED_FORMAT(Q5_0)
PETREL_WEIGHTED_FORMAT(Q5_1)
PETREL_WEIGHTED_FORMAT(Q2_K)
PETREL_WEIGHTED_FORMAT(Q3_K)
PETREL_WEIGHTED_FORMAT(Q4_K)
PETREL_WEIGHTED_FORMAT(Q5_K)
PETREL_WEIGHTED_FORMAT(Q6_K)
PETREL_WEIGHTED_FORMAT(IQ4_NL)
PETREL_WEIGHTED_FORMAT(IQ4_XS)
#undef PETREL_WEIGHTED_FORMAT

}  // namespace petrel::quant
