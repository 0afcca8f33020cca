// out = x / sqrt(mean(x^2) + eps) * weight, one workgroup per row (x and out may be one range).
#version 450
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Weight { float weight[]; };
layout(std430, binding = 2) buffer Out { float out_[]; };
layout(push_constant) uniform Push {
  uint n_rows;
  uint n_cols;
  float eps;
} p;

shared float partial[gl_WorkGroupSize.x];

void main() {
  const uint row = FlatGroupId();
  if (row >= p.n_rows) return;  // the whole workgroup: no barrier is left waiting
  const uint lid = gl_LocalInvocationID.x;
  const uint base = row * p.n_cols;
  float sum_sq = 0.0;
  for (uint c = lid; c < p.n_cols; c += gl_WorkGroupSize.x) sum_sq += x[base + c] * x[base + c];
  partial[lid] = sum_sq;
  barrier();
  for (uint stride = gl_WorkGroupSize.x / 2; stride > 0; stride /= 2) {
    if (lid < stride) partial[lid] += partial[lid + stride];
    barrier();
  }
  const float inv_rms = inversesqrt(partial[0] / float(p.n_cols) + p.eps);
  // Each invocation rereads only the columns it writes, so an in-place norm is safe.
  for (uint c = lid; c < p.n_cols; c += gl_WorkGroupSize.x)
    out_[base + c] = x[base + c] * inv_rms * weight[c];
}
