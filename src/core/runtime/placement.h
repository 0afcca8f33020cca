// Placement: which backend runs each layer, and which block weights live apart from their
// layer, decided once at load.
#pragma once

#include <string>
#include <vector>

#include "core/base/tensor.h"
#include "core/graph/graph.h"
#include "core/model/architecture.h"  // ModelWeights

namespace petrel {

// A block weight that lives where its layer runs (Placement::weights).
constexpr BackendId kWithLayer = -1;

struct Placement {
  std::vector<BackendId> layers;  // per block
  BackendId embedding = 0;        // the embedding lookup stays on the CPU (token ids are host data)
  BackendId output = 0;           // final norm + output projection
  // Per block, per weight of the family's table (LayerWeights' index): the backend of a weight
  // placed apart from its layer (`--cpu-moe`, `-ot`, a node the layer's backend cannot run),
  // or kWithLayer. Empty when every weight is with its layer. A node that reads such a weight
  // runs where the weight is (NodeBackend); the layer's KV cache and its weightless nodes stay
  // on the layer's backend, and the executor copies the values that cross.
  std::vector<std::vector<BackendId>> weights;
  // Why layers were moved off the requested backend ("layer 3 on cpu: ref does not support …").
  std::vector<std::string> notes;

  BackendId Of(int layer) const {
    if (layer < 0) return embedding;
    if (size_t(layer) >= layers.size()) return output;
    return layers[size_t(layer)];
  }

  // Where weight `index` of block `layer` lives.
  BackendId OfWeight(size_t layer, size_t index) const {
    if (layer < weights.size() && index < weights[layer].size() &&
        weights[layer][index] != kWithLayer) {
      return weights[layer][index];
    }
    return layers[layer];
  }
  // Places weight `index` of block `layer` on `backend` (kWithLayer: back with its layer).
  void SetWeight(size_t layer, size_t index, size_t n_weights, BackendId backend) {
    if (weights.size() < layers.size()) weights.resize(layers.size());
    if (weights[layer].size() < n_weights) weights[layer].resize(n_weights, kWithLayer);
    weights[layer][index] = backend;
  }

  // The backend that runs `node`: that of the first block weight it reads that lives apart from
  // its layer, else its layer's. `model_weights` are the views the node's pointers point into
  // (the host weights while planning, the placed ones while running).
  BackendId NodeBackend(const Node& node, const ModelWeights& model_weights) const;

  // As llama.cpp's `--n-gpu-layers`: the last `device_layers` blocks go to `device`, and the
  // output head too when `device_layers` exceeds the block count. Everything else is on the CPU.
  static Placement Offload(size_t n_layers, BackendId device, size_t device_layers) {
    return Split(n_layers, {device}, {1.0f}, device_layers);
  }
  // As llama.cpp's `--tensor-split` in layer mode: the last `device_layers` blocks in
  // consecutive ranges over `devices`, in proportion to `shares` (positive, one per device);
  // the output head, when `device_layers` exceeds the block count, with the last device.
  static Placement Split(size_t n_layers, const std::vector<BackendId>& devices,
                         const std::vector<float>& shares, size_t device_layers);

  // "layers 0-5: cpu, layers 6-11: ref, output: cpu", then the notes.
  std::string Describe(const std::vector<std::string>& backend_names) const;
  // The weights that live apart from their layer, grouped by name and backend:
  // "ffn_gate_exps.weight of layers 0-3: cpu; ...". "" when there are none.
  std::string DescribeWeights(const std::vector<std::string>& backend_names,
                              const ModelWeights& model_weights) const;
};

// "0-3", "0-1, 5": the runs of consecutive numbers in `sorted`.
std::string DescribeRanges(const std::vector<size_t>& sorted);

}  // namespace petrel
