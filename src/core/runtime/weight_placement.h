// Per-tensor placement at load: `-ot` rules and `--cpu-moe` place block weights apart from
// their layer, and the nodes a backend cannot run go to the CPU (the node alone when it reads
// no KV cache, else its whole layer).
#pragma once

#include <memory>
#include <vector>

#include "core/base/status.h"
#include "core/graph/graph.h"
#include "core/model/architecture.h"
#include "core/runtime/backend.h"
#include "core/runtime/offload_options.h"
#include "core/runtime/placement.h"

namespace petrel {

// One `-ot` rule with the backend its device resolved to.
struct PlacedRule {
  const TensorRule* rule;
  BackendId backend;
};

// Applies `rules` (the first whose pattern matches a tensor's GGUF name, "blk.3.ffn_up.weight",
// places it) to every block weight and the output head, then puts the expert tensors
// (WeightKind::kExperts) of the first `cpu_moe_layers` blocks that no rule placed on the CPU
// (backend 0). A rule that matches no tensor of the model is an error naming it. The token
// embedding stays on the CPU whatever a rule says (token ids are host data; noted).
Status PlaceWeightsByRule(const ModelWeights& weights, const std::vector<PlacedRule>& rules,
                          size_t cpu_moe_layers, Placement* placement);

// Puts every weight a node of `probe` (a one-token graph over `weights`) reads where that node
// runs, and moves what a backend cannot run to the CPU, noting why: a node with weights that
// reads no KV cache moves alone (its weights with it), anything else moves its whole layer.
// Fails when the CPU cannot run a node either.
Status PlaceSupportedNodes(const Graph& probe, const ModelWeights& weights,
                           const std::vector<std::unique_ptr<Backend>>& backends,
                           Placement* placement);

}  // namespace petrel
