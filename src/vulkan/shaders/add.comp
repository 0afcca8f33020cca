// out = a + b (ADD), out = silu(a) * b (SILU_MUL) or out = gelu_tanh(a) * b (GELU_MUL), element
// by element over n values.
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
#elif defined(GELU_MUL)
  // tanh-form GELU; the argument is clamped where tanh is already +-1 in f32 so that no
  // driver's exp-based tanh overflows to NaN.
  const float x = a[i];
  const float inner = clamp(0.7978845608028654 * (x + 0.044715 * x * x * x), -15.0, 15.0);
  out_[i] = 0.5 * x * (1.0 + tanh(inner)) * b[i];
#else
  out_[i] = a[i] + b[i];
#endif
}
