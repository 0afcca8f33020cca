// Rotates q (n_heads heads) and k (n_kv_heads heads) of each token in place: pair i of a head's
// first 2 * pairs dimensions turns by the token's angle i, read from the batch's cos/sin table
// (n_tokens * pairs cos values, then as many sin values). One invocation per (token, head, pair).
#version 450
#include "common.glsl"

layout(std430, binding = 0) buffer Q { float q[]; };
layout(std430, binding = 1) buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer Table { float table[]; };
layout(push_constant) uniform Push {
  uint n_tokens;
  uint n_heads;
  uint n_kv_heads;
  uint head_dim;
  uint pairs;
  uint half_split;  // 0: pairs (2i, 2i + 1); 1: pairs (i, i + pairs)
} p;

void main() {
  const uint i = FlatGroupId() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  const uint heads = p.n_heads + p.n_kv_heads;
  if (i >= p.n_tokens * heads * p.pairs) return;
  const uint pair = i % p.pairs;
  const uint head = (i / p.pairs) % heads;
  const uint token = i / (p.pairs * heads);
  const float c = table[token * p.pairs + pair];
  const float s = table[(p.n_tokens + token) * p.pairs + pair];
  const uint i0 = p.half_split != 0u ? pair : 2u * pair;
  const uint i1 = p.half_split != 0u ? pair + p.pairs : 2u * pair + 1u;
  if (head < p.n_heads) {
    const uint base = (token * p.n_heads + head) * p.head_dim;
    const float x0 = q[base + i0], x1 = q[base + i1];
    q[base + i0] = x0 * c - x1 * s;
    q[base + i1] = x0 * s + x1 * c;
  } else {
    const uint base = (token * p.n_kv_heads + head - p.n_heads) * p.head_dim;
    const float x0 = k[base + i0], x1 = k[base + i1];
    k[base + i0] = x0 * c - x1 * s;
    k[base + i1] = x0 * s + x1 * c;
  }
}
