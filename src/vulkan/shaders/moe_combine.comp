// moe_ffn's last step: out[t] = sum over r of weight(t, r) * y[grouped row of (t, r)], in the
// token's own ranking order (as the host backends sum), from moe_route.comp's route buffer.
#version 450
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Y { float y[]; };  // (grouped rows, n_out)
layout(std430, binding = 1) readonly buffer Route { uint route[]; };
layout(std430, binding = 2) writeonly buffer Out { float out_[]; };  // (n_tokens, n_out)

// Mirrors MoeCombinePush in ops_moe.cc.
layout(push_constant) uniform Push {
  uint n_tokens;
  uint n_out;
  uint top_k;
  uint pair_row_at;     // word offsets in the route buffer
  uint pair_weight_at;
} p;

void main() {
  const uint i = FlatGroupId() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= p.n_tokens * p.n_out) return;
  const uint t = i / p.n_out, col = i % p.n_out;
  float sum = 0.0;
  for (uint r = 0u; r < p.top_k; ++r) {
    const uint pair = t * p.top_k + r;
    const float w = uintBitsToFloat(route[p.pair_weight_at + pair]);
    const float v = w * y[route[p.pair_row_at + pair] * p.n_out + col];
    sum = r == 0u ? v : sum + v;
  }
  out_[i] = sum;
}
