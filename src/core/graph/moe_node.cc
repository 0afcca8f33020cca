// The moe_ffn node's contract (MoeParams, Node) as one list of checks, and the scalar router.
#include "core/graph/moe_node.h"

#include <algorithm>
#include <cmath>

namespace petrel {

const char* MoeNodeError(const Node& node) {
  const MoeParams& p = node.moe;
  if (!node.weight || !node.weight_up || !node.weight_down)
    return "needs gate, up and down experts";
  if (p.n_experts <= 0) return "has no experts";
  if (p.top_k <= 0 || p.top_k > p.n_experts) return "routes to more experts than it has";
  const TensorDesc& gate = node.weight->desc;
  const TensorDesc& up = node.weight_up->desc;
  const TensorDesc& down = node.weight_down->desc;
  if (gate.dtype != up.dtype) return "needs gate and up experts of one type";
  if (!gate.SameShape(up)) return "has gate and up experts of different shapes";
  if (gate.ne[2] != p.n_experts || down.ne[2] != p.n_experts || gate.ne[3] != 1 ||
      down.ne[3] != 1) {
    return "has expert tensors whose expert count differs from its own";
  }
  if (down.ne[0] != gate.ne[1]) return "has down experts whose width differs from gate's";
  // Optional f32 biases, one row per expert.
  auto bias_ok = [&](const TensorView* bias, int64_t width) {
    return bias == nullptr ||
           (bias->desc.dtype == DType::kF32 && bias->desc.n_elems() == width * p.n_experts);
  };
  if (!bias_ok(node.bias, gate.ne[1]) || !bias_ok(node.bias_up, gate.ne[1]) ||
      !bias_ok(node.bias_down, down.ne[1])) {
    return "has expert biases that are not f32 rows of the experts' widths";
  }
  if (!(p.glu_alpha > 0.0f) || !std::isfinite(p.glu_alpha) || !(p.glu_limit >= 0.0f) ||
      !std::isfinite(p.glu_up_offset)) {
    return "has an invalid gated activation (alpha must be positive, the limit 0 or positive)";
  }
  if (p.n_groups <= 0 || p.n_experts % p.n_groups != 0)
    return "has groups that do not divide its experts";
  if (p.groups_used <= 0 || p.groups_used > p.n_groups) return "uses more groups than it has";
  if (p.top_k > p.n_experts / p.n_groups * p.groups_used) {
    return "routes to more experts than its groups used hold";
  }
  if (p.n_groups > 1 && p.group_score == MoeGroupScore::kTopTwoSum &&
      p.n_experts / p.n_groups < 2) {
    return "scores groups of one expert by their two best";
  }
  if (!(p.scale > 0.0f) || !std::isfinite(p.scale)) return "has an invalid weight scale";
  if (node.select_bias && (node.select_bias->desc.dtype != DType::kF32 ||
                           node.select_bias->desc.n_elems() != p.n_experts)) {
    return "has a selection bias that is not one f32 per expert";
  }
  return nullptr;
}

void RouteTopK(const MoeParams& params, const float* logits, const float* bias, float* scratch,
               int32_t* experts, float* weights) {
  const int n_experts = params.n_experts, top_k = params.top_k;
  float* probs = scratch;
  float* select = scratch + n_experts;
  float* group_scores = scratch + 2 * n_experts;
  if (params.gating == MoeGating::kSigmoid) {
    for (int e = 0; e < n_experts; ++e) probs[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  } else {
    float max = logits[0];
    for (int e = 1; e < n_experts; ++e) max = std::max(max, logits[e]);
    float sum = 0.0f;
    for (int e = 0; e < n_experts; ++e) {
      probs[e] = std::exp(logits[e] - max);
      sum += probs[e];
    }
    for (int e = 0; e < n_experts; ++e) probs[e] /= sum;
  }
  for (int e = 0; e < n_experts; ++e) select[e] = bias ? probs[e] + bias[e] : probs[e];
  // Ineligible experts (dropped groups, chosen ones) are -inf; eligible scores are finite.
  constexpr float kOut = -INFINITY;
  if (params.n_groups > 1) {
    const int group_size = n_experts / params.n_groups;
    for (int g = 0; g < params.n_groups; ++g) {
      const float* s = select + g * group_size;
      float best = s[0], second = kOut;
      for (int i = 1; i < group_size; ++i) {
        if (s[i] > best) {
          second = best;
          best = s[i];
        } else if (s[i] > second) {
          second = s[i];
        }
      }
      group_scores[g] = params.group_score == MoeGroupScore::kMax ? best : best + second;
    }
    // Keep the best groups_used groups (ties: the lower index), drop the others' experts.
    for (int kept = 0; kept < params.groups_used; ++kept) {
      int best = -1;
      for (int g = 0; g < params.n_groups; ++g) {
        if (group_scores[g] != kOut && (best < 0 || group_scores[g] > group_scores[best])) best = g;
      }
      if (best < 0) break;
      group_scores[best] = kOut;
    }
    for (int g = 0; g < params.n_groups; ++g) {
      if (group_scores[g] == kOut) continue;  // kept (marked above)
      std::fill(select + g * group_size, select + (g + 1) * group_size, kOut);
    }
  }
  float chosen_sum = 0.0f;
  for (int r = 0; r < top_k; ++r) {
    // Strictly greater: the first (lowest-index) of equal values wins.
    int best = -1;
    for (int e = 0; e < n_experts; ++e) {
      if (select[e] != kOut && (best < 0 || select[e] > select[best])) best = e;
    }
    if (best < 0) {  // fewer eligible experts than top_k: refused by MoeNodeError; stay in range
      best = r < n_experts ? r : 0;
    }
    experts[r] = best;
    weights[r] = probs[best];
    chosen_sum += probs[best];
    select[best] = kOut;
  }
  if (params.norm_top_k) {
    for (int r = 0; r < top_k; ++r) weights[r] /= chosen_sum;
  }
  if (params.scale != 1.0f) {
    for (int r = 0; r < top_k; ++r) weights[r] *= params.scale;
  }
}

}  // namespace petrel
