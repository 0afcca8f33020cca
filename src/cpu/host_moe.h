// Mixture-of-experts helpers of the host backends: the experts' clamped activation (the node's
// checks and the router are core/graph/moe_node.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/graph/graph.h"
#include "core/graph/moe_node.h"  // MoeNodeError, RouteTopK

namespace petrel {

// The experts' gated activation when it is not plain silu(g) * u (MoeParams): gpt-oss's clamped
// SwiGLU, out = min(g, L) * sigmoid(alpha * min(g, L)) * (clamp(u, -L, L) + up_offset). `out`
// may be `up`.
void ClampedSwiGlu(const MoeParams& params, const float* gate, const float* up, size_t n,
                   float* out);

}  // namespace petrel
