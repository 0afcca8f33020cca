// Placement: splitting blocks over devices, per-node backends and the descriptions for logs and
// `petrel info`.
#include "core/runtime/placement.h"

#include <cmath>
#include <functional>
#include <map>

namespace petrel {

Placement Placement::Split(size_t n_layers, const std::vector<BackendId>& devices,
                           const std::vector<float>& shares, size_t device_layers) {
  Placement placement;
  placement.layers.assign(n_layers, 0);
  const size_t first = device_layers >= n_layers ? 0 : n_layers - device_layers;
  const size_t count = n_layers - first;
  double total = 0.0;
  for (float share : shares) total += double(share);
  // Device k takes the blocks between the rounded cumulative shares before and after it.
  double cumulative = 0.0;
  size_t begin = 0;
  for (size_t k = 0; k < devices.size(); ++k) {
    cumulative += double(shares[k]);
    const size_t end =
        k + 1 == devices.size()
            ? count
            : std::min(count, size_t(std::llround(double(count) * cumulative / total)));
    for (size_t j = begin; j < end; ++j) placement.layers[first + j] = devices[k];
    begin = std::max(begin, end);
  }
  if (device_layers > n_layers && !devices.empty()) placement.output = devices.back();
  return placement;
}

BackendId Placement::NodeBackend(const Node& node, const ModelWeights& model_weights) const {
  if (node.layer < 0 || size_t(node.layer) >= layers.size()) return Of(node.layer);
  const size_t l = size_t(node.layer);
  if (l >= weights.size() || weights[l].empty() || l >= model_weights.layers.size())
    return layers[l];
  const std::span<const TensorView> views = model_weights.layers[l].views();
  const std::less<const TensorView*> before;
  for (const TensorView* w : {node.weight, node.weight_up, node.weight_down, node.bias,
                              node.bias_up, node.bias_down, node.select_bias}) {
    if (w == nullptr || before(w, views.data()) || !before(w, views.data() + views.size()))
      continue;
    const size_t index = size_t(w - views.data());
    if (index < weights[l].size() && weights[l][index] != kWithLayer) return weights[l][index];
  }
  return layers[l];
}

std::string DescribeRanges(const std::vector<size_t>& sorted) {
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(sorted[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(sorted[j]);
    }
    i = j + 1;
  }
  return out;
}

std::string Placement::Describe(const std::vector<std::string>& names) const {
  // Runs of consecutive layers on one backend: "layers 0-5: cpu, layers 6-11: ref, output: cpu".
  std::string out;
  size_t start = 0;
  for (size_t l = 1; l <= layers.size(); ++l) {
    if (l == layers.size() || layers[l] != layers[start]) {
      out += out.empty() ? "" : ", ";
      out += "layers " + std::to_string(start) + "-" + std::to_string(l - 1) + ": " +
             names[size_t(layers[start])];
      start = l;
    }
  }
  out += ", output: " + names[size_t(output)];
  for (const std::string& note : notes) out += "; " + note;
  return out;
}

std::string Placement::DescribeWeights(const std::vector<std::string>& names,
                                       const ModelWeights& model_weights) const {
  // (weight name, backend) -> the blocks where that weight lives apart from its layer.
  std::map<std::pair<std::string, BackendId>, std::vector<size_t>> groups;
  for (size_t l = 0; l < weights.size() && l < model_weights.layers.size(); ++l) {
    for (size_t i = 0; i < weights[l].size(); ++i) {
      const BackendId b = weights[l][i];
      if (b == kWithLayer || b == layers[l] || !model_weights.layers[l][i].data) continue;
      groups[{model_weights.layers[l].spec(i).gguf_name, b}].push_back(l);
    }
  }
  std::string out;
  for (const auto& [key, blocks] : groups) {
    out += out.empty() ? "" : "; ";
    out += key.first + (blocks.size() == 1 ? " of layer " : " of layers ") +
           DescribeRanges(blocks) + ": " + names[size_t(key.second)];
  }
  return out;
}

}  // namespace petrel
