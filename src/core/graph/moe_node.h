// What every backend shares about a moe_ffn node: its checks, and the router as scalar code
// (the host backends route with it; so does the CUDA backend, on the host).
#pragma once

#include <cstdint>

#include "core/graph/graph.h"

namespace petrel {

// What is wrong with a moe_ffn node's weights and parameters, or nullptr when it can run: gate
// and up of one type and shape [n_in, n_ff, n_experts], down [n_ff, n_out, n_experts],
// 0 < top_k <= n_experts, optional f32 biases of one row per expert, a valid gated activation,
// groups that divide the experts.
const char* MoeNodeError(const Node& node);

// One token's routing (MoeParams): scores p = softmax(logits) (in float, max subtracted) or
// sigmoid(logits); selection scores p + bias (bias may be null); with groups, only the experts of
// the best `groups_used` groups stay eligible; the top_k largest selection scores in descending
// order, equal values in ascending expert order (groups likewise), so ties resolve the same way
// everywhere; their weights are p, divided by their sum when `norm_top_k`, times `scale`.
// `scratch` holds 2 * n_experts + n_groups floats.
void RouteTopK(const MoeParams& params, const float* logits, const float* bias, float* scratch,
               int32_t* experts, float* weights);

}  // namespace petrel
