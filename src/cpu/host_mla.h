// Multi-head latent attention helpers of the host backends: the node's checks.
#pragma once

#include "core/graph/graph.h"

namespace petrel {

// What is wrong with an mla_attention node's weights and parameters, or nullptr when it can run:
// positive sizes, an even rope part, W_UK^T [nope, kv_lora, n_heads] and W_UV
// [kv_lora, v_dim, n_heads], and a rope frequency table.
const char* MlaNodeError(const Node& node);

}  // namespace petrel
