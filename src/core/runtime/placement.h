// Placement: which backend runs each layer, decided once at load.
#pragma once

#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/base/tensor.h"

namespace petrel {

struct Placement {
  std::vector<BackendId> layers;  // per block
  BackendId embedding = 0;        // the embedding lookup stays on the CPU (token ids are host data)
  BackendId output = 0;           // final norm + output projection
  // Why layers were moved off the requested backend ("layer 3 on cpu: ref does not support …").
  std::vector<std::string> notes;

  BackendId Of(int layer) const {
    if (layer < 0) return embedding;
    if (size_t(layer) >= layers.size()) return output;
    return layers[size_t(layer)];
  }

  // As llama.cpp's `--n-gpu-layers`: the last `device_layers` blocks go to `device`, and the
  // output head too when `device_layers` exceeds the block count. Everything else is on the CPU.
  static Placement Offload(size_t n_layers, BackendId device, size_t device_layers) {
    Placement placement;
    placement.layers.assign(n_layers, 0);
    const size_t first = device_layers >= n_layers ? 0 : n_layers - device_layers;
    for (size_t l = first; l < n_layers; ++l) placement.layers[l] = device;
    if (device_layers > n_layers) placement.output = device;
    return placement;
  }

  // "layers 0-5: cpu, layers 6-11: ref, output: cpu", then the notes.
  std::string Describe(const std::vector<std::string>& backend_names) const;
};

}  // namespace petrel
