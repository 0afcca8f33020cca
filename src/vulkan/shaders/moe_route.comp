// moe_ffn's routing and grouping, in one workgroup: each token's top-k experts and weights from
// its router logits (host_moe.h's RouteTopK: softmax or sigmoid scores, an optional selection
// bias, groups, renormalisation and scale, ties to the lower expert index), then the (token,
// choice) pairs grouped by expert, experts ascending and each one's tokens in batch order (as
// the host backends group them), cut into tiles of at most TOKENS rows of one expert for
// mat_mul.comp's MOE variants.
//
// The route buffer (uint words; ops_moe.cc's MoeRouteLayout computes the same offsets):
//   [0]                      the number of tiles
//   [1, 1 + 3 * max_tiles)   per tile: expert, first grouped row, rows
//   row_token  (n_pairs)     grouped row -> token
//   pair_row   (n_pairs)     pair t * top_k + r -> grouped row
//   pair_weight (n_pairs)    the pair's weight (float bits)
//   pair_expert (n_pairs)    the pair's expert
#version 450
#include "common.glsl"

#define TOKENS 8u         // mat_mul.comp's rows per workgroup
#define MAX_EXPERTS 256u  // ops_moe.cc's kMaxExperts
#define MAX_TOP_K 32u     // ops_moe.cc's kMaxTopK
#define MAX_GROUPS 32u    // ops_moe.cc's kMaxGroups

layout(std430, binding = 0) readonly buffer Logits { float logits[]; };  // (n_tokens, n_experts)
layout(std430, binding = 1) readonly buffer SelectBias { float select_bias[]; };  // (n_experts)
layout(std430, binding = 2) coherent buffer Route { uint route[]; };

// Mirrors MoeRoutePush in ops_moe.cc.
layout(push_constant) uniform Push {
  uint n_tokens;
  uint n_experts;
  uint top_k;
  uint max_tiles;
  uint flags;  // 1: renormalise, 2: sigmoid scores, 4: selection bias, 8: groups scored by max
  uint n_groups;
  uint groups_used;
  float scale;
} p;

shared uint counts[MAX_EXPERTS];
shared uint firsts[MAX_EXPERTS];

float Prob(uint base, uint e, float max_logit, float sum) {
  const float l = logits[base + e];
  if ((p.flags & 2u) != 0u) return 1.0 / (1.0 + exp(-l));
  return exp(l - max_logit) / sum;
}

float Select(uint base, uint e, float max_logit, float sum) {
  const float s = Prob(base, e, max_logit, sum);
  return (p.flags & 4u) != 0u ? s + select_bias[e] : s;
}

void RouteToken(uint t, uint pair_weight_at, uint pair_expert_at) {
  const uint base = t * p.n_experts;
  float max_logit = logits[base];
  for (uint e = 1u; e < p.n_experts; ++e) max_logit = max(max_logit, logits[base + e]);
  float sum = 0.0;
  if ((p.flags & 2u) == 0u) {
    for (uint e = 0u; e < p.n_experts; ++e) sum += exp(logits[base + e] - max_logit);
  }
  // Groups: keep the best groups_used (ties: the lower index) as bits of `kept`.
  uint kept = 0xFFFFFFFFu;
  const uint group_size = p.n_experts / p.n_groups;
  if (p.n_groups > 1u) {
    float scores[MAX_GROUPS];
    for (uint g = 0u; g < p.n_groups; ++g) {
      float best = Select(base, g * group_size, max_logit, sum), second = -1.0 / 0.0;
      for (uint i = 1u; i < group_size; ++i) {
        const float s = Select(base, g * group_size + i, max_logit, sum);
        if (s > best) {
          second = best;
          best = s;
        } else if (s > second) {
          second = s;
        }
      }
      scores[g] = (p.flags & 8u) != 0u ? best : best + second;
    }
    kept = 0u;
    for (uint k = 0u; k < p.groups_used; ++k) {
      int best = -1;
      for (uint g = 0u; g < p.n_groups; ++g) {
        if ((kept & (1u << g)) == 0u && (best < 0 || scores[g] > scores[best])) best = int(g);
      }
      if (best >= 0) kept |= 1u << uint(best);
    }
  }
  // The top_k in (score descending, expert ascending) order: each pick is the best of those
  // after the previous pick in that order.
  float weights[MAX_TOP_K];
  float chosen_sum = 0.0;
  float prev_s = 0.0;
  int prev_e = -1;
  for (uint r = 0u; r < p.top_k; ++r) {
    int best = -1;
    float best_s = 0.0;
    for (uint e = 0u; e < p.n_experts; ++e) {
      if (p.n_groups > 1u && (kept & (1u << (e / group_size))) == 0u) continue;
      const float s = Select(base, e, max_logit, sum);
      const bool after = prev_e < 0 || s < prev_s || (s == prev_s && int(e) > prev_e);
      if (after && (best < 0 || s > best_s)) {
        best = int(e);
        best_s = s;
      }
    }
    if (best < 0) best = int(r < p.n_experts ? r : 0u);  // NaN scores: stay in range
    prev_e = best;
    prev_s = best_s;
    weights[r] = Prob(base, uint(best), max_logit, sum);
    chosen_sum += weights[r];
    route[pair_expert_at + t * p.top_k + r] = uint(best);
  }
  for (uint r = 0u; r < p.top_k; ++r) {
    float w = weights[r];
    if ((p.flags & 1u) != 0u) w /= chosen_sum;
    if (p.scale != 1.0) w *= p.scale;
    route[pair_weight_at + t * p.top_k + r] = floatBitsToUint(w);
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint wg = gl_WorkGroupSize.x;
  const uint n_pairs = p.n_tokens * p.top_k;
  const uint row_token_at = 1u + 3u * p.max_tiles;
  const uint pair_row_at = row_token_at + n_pairs;
  const uint pair_weight_at = pair_row_at + n_pairs;
  const uint pair_expert_at = pair_weight_at + n_pairs;

  for (uint t = tid; t < p.n_tokens; t += wg) RouteToken(t, pair_weight_at, pair_expert_at);
  memoryBarrierBuffer();
  barrier();

  for (uint e = tid; e < p.n_experts; e += wg) {
    uint count = 0u;
    for (uint i = 0u; i < n_pairs; ++i) count += route[pair_expert_at + i] == e ? 1u : 0u;
    counts[e] = count;
  }
  barrier();
  if (tid == 0u) {
    uint row = 0u, n_tiles = 0u;
    for (uint e = 0u; e < p.n_experts; ++e) {
      firsts[e] = row;
      for (uint done = 0u; done < counts[e]; done += TOKENS) {
        route[1u + 3u * n_tiles] = e;
        route[2u + 3u * n_tiles] = row + done;
        route[3u + 3u * n_tiles] = min(TOKENS, counts[e] - done);
        ++n_tiles;
      }
      row += counts[e];
    }
    route[0] = n_tiles;
  }
  barrier();
  for (uint e = tid; e < p.n_experts; e += wg) {
    uint next = firsts[e];
    for (uint i = 0u; i < n_pairs; ++i) {
      if (route[pair_expert_at + i] != e) continue;
      route[row_token_at + next] = i / p.top_k;
      route[pair_row_at + i] = next;
      ++next;
    }
  }
}
