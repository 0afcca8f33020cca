// The per-element arithmetic of the CUDA backend's element-wise and row kernels, written once for
// the device and the host: elementwise.cu runs it on the GPU, and the unit tests run the same
// functions on the host against the scalar reference (src/ref), so the formulas are checked on
// machines without a GPU. No CUDA headers: only <math.h> functions both compilers provide.
#pragma once

#include <math.h>

#include "cuda/kernels_common.cuh"

namespace petrel::cuda {

// out = silu(gate) * up.
PETREL_HD float SiluMulOf(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

// out = gelu(gate) * up, GELU in the tanh form (as the CPU backend and the reference).
PETREL_HD float GeluMulOf(float gate, float up) {
  const float inner = 0.7978845608028654f * (gate + 0.044715f * gate * gate * gate);
  return 0.5f * gate * (1.0f + tanhf(inner)) * up;
}

PETREL_HD float AddOf(float a, float b) { return a + b; }
PETREL_HD float ScaleOf(float x, float factor) { return x * factor; }
// Soft-capping: cap * tanh(x / cap), cap > 0.
PETREL_HD float SoftcapOf(float x, float cap) { return cap * tanhf(x / cap); }

// rms_norm: the factor each value of a row is multiplied by (before its weight), from the sum of
// the row's squares.
PETREL_HD float RmsInverse(float sum_squares, int n, float eps) {
  return 1.0f / sqrtf(sum_squares / float(n) + eps);
}
PETREL_HD float RmsNormOf(float x, float inverse, float weight) { return x * inverse * weight; }

// RoPE: the two dimensions pair i of a head rotates, interleaved (2i, 2i+1) or half-split
// (i, i + pairs).
struct RopePair {
  int first, second;
};
PETREL_HD RopePair RopePairOf(int i, int pairs, bool half_split) {
  return half_split ? RopePair{i, i + pairs} : RopePair{2 * i, 2 * i + 1};
}
// The angle of pair i at `position`, in double (as the CPU backend computes its tables), so every
// backend turns by the same float cos and sin.
PETREL_HD double RopeAngle(int position, double inv_freq) { return double(position) * inv_freq; }
struct Rotated {
  float first, second;
};
PETREL_HD Rotated RotatePair(float x0, float x1, float cos_angle, float sin_angle) {
  return Rotated{x0 * cos_angle - x1 * sin_angle, x0 * sin_angle + x1 * cos_angle};
}

}  // namespace petrel::cuda
