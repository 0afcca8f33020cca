// out = x * scalar (SCALE) or out = scalar * tanh(x / scalar) (SOFTCAP), element by element over
// n values (x and out may be one range).
#version 450
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Out { float out_[]; };
layout(push_constant) uniform Push {
  uint n;
  float scalar;
} p;

void main() {
  const uint i = FlatGroupId() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= p.n) return;
#ifdef SOFTCAP
  // Clamped where tanh is already +-1 in f32, so that no driver's exp-based tanh overflows.
  out_[i] = p.scalar * tanh(clamp(x[i] / p.scalar, -15.0, 15.0));
#else
  out_[i] = x[i] * p.scalar;
#endif
}
