// Per-tensor placement: rules over GGUF names, the experts on the CPU, per-node fallback.
#include "core/runtime/weight_placement.h"

#include <functional>
#include <string>

namespace petrel {
namespace {

// The indices into `layer`'s views of the block weights `node` reads.
std::vector<size_t> NodeWeightIndices(const Node& node, const LayerWeights& layer) {
  const std::span<const TensorView> views = layer.views();
  const std::less<const TensorView*> before;
  std::vector<size_t> indices;
  for (const TensorView* w : {node.weight, node.weight_up, node.weight_down, node.bias,
                              node.bias_up, node.bias_down, node.select_bias}) {
    if (w == nullptr || before(w, views.data()) || !before(w, views.data() + views.size()))
      continue;
    indices.push_back(size_t(w - views.data()));
  }
  return indices;
}

bool ReadsKv(OpKind op) { return op == OpKind::kAttention || op == OpKind::kMlaAttention; }

}  // namespace

Status PlaceWeightsByRule(const ModelWeights& weights, const std::vector<PlacedRule>& rules,
                          size_t cpu_moe_layers, Placement* placement) {
  std::vector<uint8_t> used(rules.size(), 0);
  // The first rule whose pattern occurs in `name`, or -1.
  auto match = [&](const std::string& name) -> int {
    for (size_t r = 0; r < rules.size(); ++r) {
      if (std::regex_search(name, rules[r].rule->regex)) {
        used[r] = 1;
        return int(r);
      }
    }
    return -1;
  };
  for (size_t l = 0; l < weights.layers.size() && l < placement->layers.size(); ++l) {
    const LayerWeights& layer = weights.layers[l];
    const std::string prefix = "blk." + std::to_string(l) + ".";
    for (size_t i = 0; i < layer.size(); ++i) {
      // Absent weights and a fused tensor's parts (views into the whole) are not tensors of
      // the file.
      if (!layer[i].data || layer.spec(i).IsFusedPart()) continue;
      const int r = match(prefix + layer.spec(i).gguf_name);
      if (r >= 0) {
        placement->SetWeight(l, i, layer.size(), rules[size_t(r)].backend);
        // A fused tensor's parts are what the nodes read: they go with it.
        for (size_t j = 0; j < layer.size(); ++j) {
          if (layer.spec(j).fused_in == int(i)) {
            placement->SetWeight(l, j, layer.size(), rules[size_t(r)].backend);
          }
        }
      } else if (l < cpu_moe_layers && layer.spec(i).kind == WeightKind::kExperts) {
        placement->SetWeight(l, i, layer.size(), 0);
      }
    }
  }
  const bool tied =
      weights.output.data != nullptr && weights.output.data == weights.token_embd.data;
  // The output head moves as one: its projection's rule, else its norm's.
  int output_rule = -1;
  if (weights.output.data && !tied) output_rule = match("output.weight");
  if (weights.output_norm.data) {
    const int r = match("output_norm.weight");
    if (output_rule < 0) output_rule = r;
  }
  if (output_rule >= 0) placement->output = rules[size_t(output_rule)].backend;
  if (weights.token_embd.data) {
    const int r = match("token_embd.weight");
    if (r >= 0 && rules[size_t(r)].backend != 0) {
      placement->notes.push_back("token_embd.weight stays on the cpu: token ids are host data");
    }
  }
  for (size_t r = 0; r < rules.size(); ++r) {
    if (!used[r]) {
      return Error("tensor override '%s': the pattern matches no tensor of this model",
                   rules[r].rule->text.c_str());
    }
  }
  return Status::Ok();
}

Status PlaceSupportedNodes(const Graph& probe, const ModelWeights& weights,
                           const std::vector<std::unique_ptr<Backend>>& backends,
                           Placement* placement) {
  const size_t n_layers = placement->layers.size();
  for (const Node& node : probe.nodes) {
    const bool in_block = node.layer >= 0 && size_t(node.layer) < n_layers;
    const size_t l = size_t(node.layer);
    std::vector<size_t> indices;
    if (in_block && l < weights.layers.size()) indices = NodeWeightIndices(node, weights.layers[l]);
    const BackendId b = placement->NodeBackend(node, weights);
    // A node's weights (its biases too) live together where it runs.
    if (b != placement->Of(node.layer)) {
      for (size_t i : indices) placement->SetWeight(l, i, weights.layers[l].size(), b);
    }
    if (backends[size_t(b)]->Supports(node)) continue;
    const std::string what =
        std::string(OpName(node.op)) +
        (node.weight ? std::string(" with ") + DTypeName(node.weight->desc.dtype) + " weights"
                     : "");
    const std::string where = node.layer < 0 ? "embedding"
                              : !in_block    ? "output"
                                             : "layer " + std::to_string(node.layer);
    if (b == 0 || !backends[0]->Supports(node)) {
      return Error("%s: no backend of this build runs %s", where.c_str(), what.c_str());
    }
    if (in_block && !indices.empty() && !ReadsKv(node.op)) {
      // Only this node moves: the layer's attention and KV cache stay on the device.
      for (size_t i : indices) placement->SetWeight(l, i, weights.layers[l].size(), 0);
      placement->notes.push_back(where + " " + OpName(node.op) + " on " + backends[0]->Name() +
                                 ": " + backends[size_t(b)]->Name() + " does not run " + what);
      continue;
    }
    placement->notes.push_back(where + " on " + backends[0]->Name() + ": " +
                               backends[size_t(b)]->Name() + " does not run " + what);
    if (node.layer < 0) {
      placement->embedding = 0;
    } else if (!in_block) {
      placement->output = 0;
    } else {
      placement->layers[l] = 0;
    }
  }
  return Status::Ok();
}

}  // namespace petrel
