// out = a + b (ADD) or out = silu(a) * b (SILU_MUL), element by element over n values.
#version 450
#include "common.glsl"

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer Out { float out_[]; };
layout(push_constant) uniform Push { uint n; } p;

void main() {
  const uint i = FlatGroupId() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= p.n) return;
#ifdef SILU_MUL
  const float x = a[i];
  out_[i] = x / (1.0 + exp(-x)) * b[i];
#else
  out_[i] = a[i] + b[i];
#endif
}
