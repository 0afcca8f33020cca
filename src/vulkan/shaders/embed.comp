// out[t] = row tokens[t] of the table, as f32: each invocation decodes 8 elements of a row.
// Token ids outside the table give a row of zeros (a bad id must not read past the table).
#version 450
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Table { uint table[]; };
layout(std430, binding = 1) readonly buffer Tokens { int tokens[]; };
layout(std430, binding = 2) writeonly buffer Out { float out_[]; };
layout(std430, binding = 3) readonly buffer Grids { uint grids[]; };  // dequant.glsl's codebooks
layout(push_constant) uniform Push {
  uint dim;              // elements per row
  uint n_rows;           // rows of the table
  uint n_tokens;
  uint row_bytes;
  uint groups_per_token; // workgroups covering one row
} p;

#define WORDS table
#define DECODE8 DecodeTable
#include "dequant.glsl"

void main() {
  const uint group = FlatGroupId();
  const uint t = group / p.groups_per_token;
  if (t >= p.n_tokens) return;
  const uint e = ((group % p.groups_per_token) * gl_WorkGroupSize.x + gl_LocalInvocationID.x) * 8u;
  if (e >= p.dim) return;
  const uint token = uint(tokens[t]);
  float v[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
  if (token < p.n_rows) DecodeTable(token * p.row_bytes, e, p.dim, v);
  const uint out_row = t * p.dim;
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    if (e + i < p.dim) out_[out_row + e + i] = v[i];
  }
}
