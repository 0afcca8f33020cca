// out row i = in row rows[i]: the rows kept for the output head.
#version 450
#include "common.glsl"

layout(std430, binding = 0) readonly buffer In { float in_[]; };
layout(std430, binding = 1) readonly buffer Rows { int rows[]; };
layout(std430, binding = 2) writeonly buffer Out { float out_[]; };
layout(push_constant) uniform Push {
  uint n_rows;  // selected rows
  uint n_cols;
} p;

void main() {
  const uint i = FlatGroupId() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (i >= p.n_rows * p.n_cols) return;
  const uint row = i / p.n_cols, col = i % p.n_cols;
  out_[i] = in_[uint(rows[row]) * p.n_cols + col];
}
