// Writes token rows of K or V (f32 activations) into their KV cache slots, converted to the
// cache's element type (kv_common.glsl). One workgroup per token; each invocation writes whole
// 32-bit words of the row. F16 and Q8_0 rows are a multiple of 2 bytes, so a row may begin or
// end inside a word shared with a neighbouring slot (perhaps written by another workgroup now):
// those edge halves are merged with atomics, every other word is stored whole.
#version 450
#include "common.glsl"
#include "kv_common.glsl"

layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) buffer Cache { uint cache[]; };
layout(std430, binding = 2) readonly buffer Slots { int slots[]; };
layout(push_constant) uniform Push {
  uint n_tokens;
  uint row_elems;
  uint row_bytes;
} p;

#if defined(KV_F16)
// The 16 bits at byte `rb` (even) of the row starting at src[base].
uint RowHalf(uint base, uint rb) { return F32ToF16Bits(src[base + rb / 2u]); }
#elif defined(KV_Q8_0)
uint RowHalf(uint base, uint rb) {
  const uint block = rb / 34u, offset = rb % 34u;
  const uint first = base + block * 32u;
  float amax = 0.0;
  for (uint j = 0u; j < 32u; ++j) amax = max(amax, abs(src[first + j]));
  // amax / 127 and 1 / d are never ties (127 and d's odd factors leave too many bits).
  const float d = amax > 0.0 ? DivideRounded(amax, 127.0) : 0.0;
  if (offset == 0u) return F32ToF16Bits(d);
  const float id = d != 0.0 ? DivideRounded(1.0, d) : 0.0;
  const uint i = offset - 2u;
  precise float x0 = src[first + i] * id;
  precise float x1 = src[first + i + 1u] * id;
  const int q0 = int(RoundHalfAway(x0)), q1 = int(RoundHalfAway(x1));
  return (uint(q0) & 0xFFu) | ((uint(q1) & 0xFFu) << 8);
}
#endif

void main() {
  const uint token = FlatGroupId();
  if (token >= p.n_tokens) return;
  const uint base = token * p.row_elems;
  const uint slot = uint(slots[token]);
#if defined(KV_F32)
  for (uint i = gl_LocalInvocationID.x; i < p.row_elems; i += gl_WorkGroupSize.x)
    cache[slot * p.row_elems + i] = floatBitsToUint(src[base + i]);
#else
  const uint a0 = slot * p.row_bytes, a1 = a0 + p.row_bytes;  // both even
  const uint w0 = a0 / 4u, w1 = (a1 + 3u) / 4u;
  for (uint w = w0 + gl_LocalInvocationID.x; w < w1; w += gl_WorkGroupSize.x) {
    const uint lo = 4u * w, hi = lo + 2u;
    const bool lo_in = lo >= a0 && lo < a1, hi_in = hi >= a0 && hi < a1;
    const uint lo_bits = lo_in ? RowHalf(base, lo - a0) : 0u;
    const uint hi_bits = hi_in ? RowHalf(base, hi - a0) << 16 : 0u;
    if (lo_in && hi_in) {
      cache[w] = lo_bits | hi_bits;
    } else if (lo_in) {
      atomicAnd(cache[w], 0xFFFF0000u);
      atomicOr(cache[w], lo_bits);
    } else {
      atomicAnd(cache[w], 0x0000FFFFu);
      atomicOr(cache[w], hi_bits);
    }
  }
#endif
}
