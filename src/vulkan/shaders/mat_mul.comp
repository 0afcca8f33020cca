// mat_mul: out[t][r] = dot(W row r, x[t]) (+ bias[r] when has_bias).
// GATED (gated_ffn): out[t][r] = silu(dot(gate row r, x[t])) * dot(up row r, x[t]).
//
// MOE (moe_ffn's expert products, with GATED for gate/up and without for down): the tokens of
// a workgroup are a tile of moe_route.comp's grouped rows, all routed to one expert, whose
// matrix is read at that expert's offset in the stacked weights; x rows are gathered through
// the route's row -> token map (GATED) or are the grouped rows themselves (down). Biases are
// per expert; GATED applies the plain silu(g) * u or gpt-oss's clamped SwiGLU.
//
// One workgroup per (row, group of up to TOKENS tokens): its invocations stride over the row 8
// elements at a time, decode them once and use them for every token of the group (one token is
// the matrix-vector case), then sum their partial dots in shared memory, or with subgroupAdd
// first in the SUBGROUP_REDUCE variant. Groups past the device's x limit fold into y.
#version 450
#include "common.glsl"
#ifdef SUBGROUP_REDUCE
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#endif

#define TOKENS 8u
layout(constant_id = 0) const uint WG = 64;  // the workgroup size (local_size_x_id = 0)

#ifdef GATED
layout(std430, binding = 0) readonly buffer Gate { uint gate[]; };
layout(std430, binding = 1) readonly buffer Up { uint up[]; };
layout(std430, binding = 2) readonly buffer X { float x[]; };
layout(std430, binding = 3) writeonly buffer Out { float out_[]; };
#else
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, binding = 3) writeonly buffer Out { float out_[]; };
#endif
layout(std430, binding = 4) readonly buffer Grids { uint grids[]; };  // dequant.glsl's codebooks

#ifdef MOE
// moe_route.comp's output (its layout is described there).
layout(std430, binding = 5) readonly buffer Route { uint route[]; };
#ifdef GATED
layout(std430, binding = 6) readonly buffer GateBias { float gate_bias[]; };
layout(std430, binding = 7) readonly buffer UpBias { float up_bias[]; };
#endif
// Mirrors MoeMatMulPush in ops_moe.cc.
layout(push_constant) uniform Push {
  uint n_in;          // elements per weight row and per x row
  uint n_rows;        // weight rows of one expert = output columns
  uint n_tokens;      // unused (the tiles give each group's rows)
  uint row_bytes;     // bytes between weight rows
  uint token_groups;  // tiles the route may hold (the grid's second factor)
  uint has_bias;      // bit 0: the gate's (or down's) bias, bit 1: up's, each n_rows per expert
  uint row_token_at;  // GATED: word offset of the route's row -> token map
  uint plain_silu;    // GATED: 1 for silu(g) * u, 0 for the clamped form below
  float glu_alpha, glu_limit, glu_up_offset;
} p;
#else
// Mirrors MatMulPush in ops_matmul.cc.
layout(push_constant) uniform Push {
  uint n_in;          // elements per weight row and per x row
  uint n_rows;        // weight rows = output columns
  uint n_tokens;      // x rows = output rows
  uint row_bytes;     // bytes between weight rows
  uint token_groups;  // ceil(n_tokens / TOKENS)
  uint has_bias;      // mat_mul: bias holds n_rows values
} p;
#endif

#ifdef GATED
#define WORDS gate
#define DECODE8 DecodeGate
#include "dequant.glsl"
#undef WORDS
#undef DECODE8
#define WORDS up
#define DECODE8 DecodeUp
#include "dequant.glsl"
#define N_SUMS 2u
#else
#define WORDS w
#define DECODE8 DecodeW
#include "dequant.glsl"
#define N_SUMS 1u
#endif

shared float partial[N_SUMS * TOKENS * WG];

void main() {
  const uint group = FlatGroupId();
  // Token groups vary fastest: the groups of one row run together and share its weight reads.
  const uint row = group / p.token_groups;
  if (row >= p.n_rows) return;
#ifdef MOE
  const uint tile = group % p.token_groups;
  if (tile >= route[0]) return;  // fewer tiles than the bound this batch
  const uint expert = route[1u + 3u * tile];
  const uint t0 = route[2u + 3u * tile];  // first grouped row of the tile
  const uint n_t = route[3u + 3u * tile];
  const uint w_row = (expert * p.n_rows + row) * p.row_bytes;
#else
  const uint t0 = (group % p.token_groups) * TOKENS;
  const uint n_t = min(TOKENS, p.n_tokens - t0);
  const uint w_row = row * p.row_bytes;
#endif
  const uint tid = gl_LocalInvocationID.x;

  float acc[N_SUMS * TOKENS];
  [[unroll]] for (uint i = 0; i < N_SUMS * TOKENS; ++i) acc[i] = 0.0;
  const uint chunks = (p.n_in + 7u) / 8u;
  for (uint c = tid; c < chunks; c += WG) {
    const uint e = c * 8u;
    float wv[8];
#ifdef GATED
    float uv[8];
    DecodeGate(w_row, e, p.n_in, wv);
    DecodeUp(w_row, e, p.n_in, uv);
#else
    DecodeW(w_row, e, p.n_in, wv);
#endif
    [[unroll]] for (uint t = 0; t < TOKENS; ++t) {
      if (t >= n_t) break;
#if defined(MOE) && defined(GATED)
      const uint xr = route[p.row_token_at + t0 + t] * p.n_in + e;
#else
      const uint xr = (t0 + t) * p.n_in + e;
#endif
      float s = 0.0;
#ifdef GATED
      float su = 0.0;
#endif
      [[unroll]] for (uint i = 0; i < 8u; ++i) {
        const float xi = e + i < p.n_in ? x[xr + i] : 0.0;
        s += wv[i] * xi;
#ifdef GATED
        su += uv[i] * xi;
#endif
      }
      acc[t] += s;
#ifdef GATED
      acc[TOKENS + t] += su;
#endif
    }
  }

  // Sum acc over the workgroup: sums[k] is partial sum k (gate sums, then up sums when GATED).
#ifdef SUBGROUP_REDUCE
  [[unroll]] for (uint k = 0; k < N_SUMS * TOKENS; ++k) {
    const float s = subgroupAdd(acc[k]);
    if (subgroupElect()) partial[k * WG + gl_SubgroupID] = s;
  }
  barrier();
  const uint n_partials = gl_NumSubgroups;
#else
  [[unroll]] for (uint k = 0; k < N_SUMS * TOKENS; ++k) partial[k * WG + tid] = acc[k];
  barrier();
  for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (tid < stride) {
      [[unroll]] for (uint k = 0; k < N_SUMS * TOKENS; ++k) {
        partial[k * WG + tid] += partial[k * WG + tid + stride];
      }
    }
    barrier();
  }
  const uint n_partials = 1u;
#endif
  if (tid >= n_t) return;
  float sum = 0.0;
  for (uint i = 0; i < n_partials; ++i) sum += partial[tid * WG + i];
#if defined(GATED) && defined(MOE)
  float sum_up = 0.0;
  for (uint i = 0; i < n_partials; ++i) sum_up += partial[(TOKENS + tid) * WG + i];
  const uint bias_at = expert * p.n_rows + row;
  if ((p.has_bias & 1u) != 0u) sum += gate_bias[bias_at];
  if ((p.has_bias & 2u) != 0u) sum_up += up_bias[bias_at];
  float act;
  if (p.plain_silu != 0u) {
    act = sum / (1.0 + exp(-sum)) * sum_up;
  } else {
    // host_moe.cc's ClampedSwiGlu: a limit of 0 clamps nothing.
    if (p.glu_limit > 0.0) {
      sum = min(sum, p.glu_limit);
      sum_up = clamp(sum_up, -p.glu_limit, p.glu_limit);
    }
    act = sum / (1.0 + exp(-p.glu_alpha * sum)) * (sum_up + p.glu_up_offset);
  }
  out_[(t0 + tid) * p.n_rows + row] = act;
#elif defined(GATED)
  float sum_up = 0.0;
  for (uint i = 0; i < n_partials; ++i) sum_up += partial[(TOKENS + tid) * WG + i];
  out_[(t0 + tid) * p.n_rows + row] = sum / (1.0 + exp(-sum)) * sum_up;
#elif defined(MOE)
  if (p.has_bias != 0u) sum += bias[expert * p.n_rows + row];
  out_[(t0 + tid) * p.n_rows + row] = sum;
#else
  if (p.has_bias != 0u) sum += bias[row];
  out_[(t0 + tid) * p.n_rows + row] = sum;
#endif
}
