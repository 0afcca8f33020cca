// Causal attention of each query token over its sequence's KV rows, read through the paged
// cache's block table. One workgroup per (token, query head): positions are taken a tile of
// gl_WorkGroupSize.x at a time, one invocation per position for the scores, then one per head
// dimension for the weighted sum of V, with an online softmax (running max and sum, f32) so any
// context length fits. A decode step still spreads over n_heads workgroups.
#version 450
#include "common.glsl"

#define MAX_HEAD_DIM 512   // vulkan/ops_attention.cc: kMaxHeadDim
#define MAX_GROUP 256      // the largest workgroup size the host may pick

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer KCache { uint k_cache[]; };
layout(std430, binding = 2) readonly buffer VCache { uint v_cache[]; };
layout(std430, binding = 3) readonly buffer TokenSeq { int token_seq[]; };
layout(std430, binding = 4) readonly buffer BlockTables { int block_tables[]; };
layout(std430, binding = 5) readonly buffer BlockTableBegin { int block_table_begin[]; };
layout(std430, binding = 6) readonly buffer NCtx { int n_ctx[]; };
layout(std430, binding = 7) writeonly buffer Out { float out_[]; };
layout(push_constant) uniform Push {
  uint n_tokens;
  uint n_heads;
  uint n_kv_heads;
  uint head_dim;
  uint block_tokens;
  uint row_elems;
  uint row_bytes;
  float scale;
  float softcap;  // 0: none
  uint window;    // 0: every earlier position
} p;

// Element e of the cache row in flat slot `slot`, as f32.
#if defined(KV_F32)
#define LOAD_KV(cache, slot, e) uintBitsToFloat((cache)[(slot) * p.row_elems + (e)])
#elif defined(KV_F16)
#define LOAD_KV(cache, slot, e) HalfToFloat(U16_AT(cache, (slot) * p.row_bytes + 2u * (e)))
#elif defined(KV_Q8_0)
// Block e / 32 of the row: an f16 scale, then 32 int8 levels.
#define Q8_BLOCK(slot, e) ((slot) * p.row_bytes + ((e) >> 5) * 34u)
#define LOAD_KV(cache, slot, e)                                                              \
  (HalfToFloat(U16_AT(cache, Q8_BLOCK(slot, e))) *                                           \
   float(int(BYTE_AT(cache, Q8_BLOCK(slot, e) + 2u + ((e) & 31u)) << 24) >> 24))
#endif

shared float q_head[MAX_HEAD_DIM];
shared float acc[MAX_HEAD_DIM];  // invocation i owns dimensions i, i + group size, ...
shared float probs[MAX_GROUP];
shared uint slots[MAX_GROUP];
shared float reduce_scratch[MAX_GROUP];

float ReduceMax(float value) {
  const uint lid = gl_LocalInvocationID.x;
  reduce_scratch[lid] = value;
  barrier();
  for (uint stride = gl_WorkGroupSize.x / 2u; stride > 0u; stride /= 2u) {
    if (lid < stride) reduce_scratch[lid] = max(reduce_scratch[lid], reduce_scratch[lid + stride]);
    barrier();
  }
  const float result = reduce_scratch[0];
  barrier();  // before the scratch is written again
  return result;
}

float ReduceSum(float value) {
  const uint lid = gl_LocalInvocationID.x;
  reduce_scratch[lid] = value;
  barrier();
  for (uint stride = gl_WorkGroupSize.x / 2u; stride > 0u; stride /= 2u) {
    if (lid < stride) reduce_scratch[lid] += reduce_scratch[lid + stride];
    barrier();
  }
  const float result = reduce_scratch[0];
  barrier();
  return result;
}

void main() {
  const uint group = FlatGroupId();
  if (group >= p.n_tokens * p.n_heads) return;  // the whole workgroup
  const uint token = group / p.n_heads, head = group % p.n_heads;
  const uint lid = gl_LocalInvocationID.x, size = gl_WorkGroupSize.x;
  const uint kv_first = (head / (p.n_heads / p.n_kv_heads)) * p.head_dim;  // in the cache row
  const uint table = uint(block_table_begin[token_seq[token]]);
  const uint end = uint(n_ctx[token]);
  const uint begin = p.window != 0u && end > p.window ? end - p.window : 0u;
  const uint q_first = (token * p.n_heads + head) * p.head_dim;

  for (uint d = lid; d < p.head_dim; d += size) {
    q_head[d] = q[q_first + d];
    acc[d] = 0.0;
  }
  barrier();

  float running_max = 0.0, running_sum = 0.0;
  bool first_tile = true;
  for (uint tile = begin; tile < end; tile += size) {  // uniform: every invocation loops alike
    const uint count = min(size, end - tile);
    // Scores: one position per invocation.
    float score = -3.0e38;
    if (lid < count) {
      const uint pos = tile + lid;
      const uint slot =
          uint(block_tables[table + pos / p.block_tokens]) * p.block_tokens + pos % p.block_tokens;
      slots[lid] = slot;
      float dot_qk = 0.0;
      for (uint d = 0u; d < p.head_dim; ++d) dot_qk += q_head[d] * LOAD_KV(k_cache, slot, kv_first + d);
      score = p.scale * dot_qk;
      // tanh of a large argument is +-1; the clamp keeps drivers' exp-based tanh from overflow.
      if (p.softcap > 0.0) score = p.softcap * tanh(clamp(score / p.softcap, -15.0, 15.0));
    }
    const float tile_max = ReduceMax(score);
    const float new_max = first_tile ? tile_max : max(running_max, tile_max);
    const float weight = lid < count ? exp(score - new_max) : 0.0;
    probs[lid] = weight;
    const float tile_sum = ReduceSum(weight);  // its barriers also publish probs and slots
    const float rescale = first_tile ? 0.0 : exp(running_max - new_max);
    running_sum = running_sum * rescale + tile_sum;
    running_max = new_max;
    first_tile = false;
    // The weighted V rows: one head dimension per invocation.
    for (uint d = lid; d < p.head_dim; d += size) {
      float sum = acc[d] * rescale;
      for (uint j = 0u; j < count; ++j) sum += probs[j] * LOAD_KV(v_cache, slots[j], kv_first + d);
      acc[d] = sum;
    }
    barrier();  // probs and slots are rewritten by the next tile
  }
  // end > begin always (a token attends at least itself), so running_sum > 0.
  for (uint d = lid; d < p.head_dim; d += size) out_[q_first + d] = acc[d] / running_sum;
}
