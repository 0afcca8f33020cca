// The device memory plan: sums of tensor sizes and the arena layout of one micro-batch.
#include "core/runtime/memory_plan.h"

#include <algorithm>

#include "core/runtime/engine.h"    // PickMicroBatch, Engine::kActivationShare
#include "core/runtime/executor.h"  // LayOutArenas

namespace petrel {

size_t DeviceMemoryPlan::DeviceWeightBytes(const Placement& placement, BackendId device) const {
  size_t bytes = placement.output == device ? output_weight_bytes : 0;
  for (size_t l = 0; l < layer_weight_bytes.size() && l < placement.layers.size(); ++l) {
    if (l >= placement.weights.size() || placement.weights[l].empty()) {
      bytes += placement.layers[l] == device ? layer_weight_bytes[l] : 0;
      continue;
    }
    for (size_t i = 0; i < weight_bytes[l].size(); ++i) {
      if (placement.OfWeight(l, i) == device) bytes += weight_bytes[l][i];
    }
  }
  return bytes;
}

size_t DeviceMemoryPlan::DeviceBytes(const Placement& placement, BackendId device) const {
  size_t bytes = DeviceWeightBytes(placement, device);
  bool any = bytes > 0 || placement.output == device;
  for (size_t l = 0; l < layer_weight_bytes.size() && l < placement.layers.size(); ++l) {
    if (placement.layers[l] != device) continue;
    bytes += LayerKvBytes();
    any = true;
  }
  return any ? bytes + activation_bytes : 0;
}

size_t DeviceMemoryPlan::OffloadBytes(size_t device_layers) const {
  return DeviceBytes(Placement::Offload(n_layers(), 1, device_layers), 1);
}

size_t DeviceMemoryPlan::Margin(size_t free_bytes) {
  return (size_t(64) << 20) + free_bytes / 20;
}

size_t DeviceMemoryPlan::FitLayers(size_t free_bytes) const {
  const size_t margin = Margin(free_bytes);
  const size_t budget = free_bytes > margin ? free_bytes - margin : 0;
  // OffloadBytes grows with the count, so the first count that does not fit ends the search.
  size_t fit = 0;
  for (size_t layers = 1; layers <= n_layers() + 1; ++layers) {
    if (OffloadBytes(layers) > budget) break;
    fit = layers;
  }
  return fit;
}

Result<std::vector<size_t>> ArenaBytesPerBackend(const LoadedModel& model,
                                                 const Placement& placement, size_t n_backends,
                                                 size_t tokens) {
  Graph graph;
  model.arch->build_graph(model.config, model.weights, tokens, 1, &graph);
  if (model.lora) {  // the adapters' values live in the same arenas, as many as a pass can add
    Graph adapted;
    model.lora->AddToGraph(model.weights, graph, model.lora->PerRowApplications(), &adapted);
    graph = std::move(adapted);
  }
  PETREL_ASSIGN_OR_RETURN(ArenaLayout layout,
                          LayOutArenas(graph, placement, n_backends, &model.weights));
  return layout.bytes;
}

Result<size_t> DefaultMicroBatch(const LoadedModel& model, const Placement& placement,
                                 size_t n_backends, size_t max_batch_tokens) {
  return PickMicroBatch(model.weight_bytes, Engine::kActivationShare, max_batch_tokens,
                        [&](size_t tokens) -> Result<size_t> {
                          PETREL_ASSIGN_OR_RETURN(
                              const std::vector<size_t> bytes,
                              ArenaBytesPerBackend(model, placement, n_backends, tokens));
                          size_t total = 0;
                          for (size_t b : bytes) total += b;
                          return total;
                        });
}

Result<DeviceMemoryPlan> PlanDeviceMemory(const LoadedModel& model, const KvCacheOptions& kv,
                                          size_t ubatch_tokens) {
  const ModelConfig& config = model.config;
  const ModelWeights& weights = model.weights;
  DeviceMemoryPlan plan;
  plan.ubatch_tokens = ubatch_tokens;
  auto bytes_of = [](const TensorView& view) { return view.data ? view.desc.bytes() : size_t(0); };
  for (const LayerWeights& layer : weights.layers) {
    size_t bytes = 0;
    std::vector<size_t>& per_weight = plan.weight_bytes.emplace_back(layer.size(), 0);
    // A fused tensor (Phi-3's qkv, gate_up) goes to the device as its parts, which cover its
    // rows exactly (the engine places only weights that nodes read): counted once, as the whole.
    for (size_t i = 0; i < layer.size(); ++i) {
      if (!layer.spec(i).IsFusedPart()) per_weight[i] = bytes_of(layer[i]);
      bytes += per_weight[i];
    }
    plan.layer_weight_bytes.push_back(bytes);
  }
  // A tied head is the embedding matrix: on the device it is one more copy of it (the
  // embedding lookup stays on the CPU).
  plan.output_weight_bytes = bytes_of(weights.output) + bytes_of(weights.output_norm);
  const std::optional<uint64_t> row = RowBytes(kv.dtype, uint64_t(config.kv_row_elems()));
  if (!row) {
    return Error("KV cache type %s needs rows of whole %u-element blocks; this model's are %lld",
                 DTypeName(kv.dtype), Traits(kv.dtype).block_elems, (long long)config.kv_row_elems());
  }
  plan.kv_bytes_per_token = (config.kv_has_values() ? 2 : 1) * size_t(*row);
  const size_t n_blocks = kv.n_blocks ? kv.n_blocks
                                      : (kv.context + kv.block_tokens - 1) / kv.block_tokens;
  plan.kv_tokens = n_blocks * kv.block_tokens;
  // Every block and the head on the device: the largest arena any offload count needs there.
  const Placement all = Placement::Offload(plan.n_layers(), 1, plan.n_layers() + 1);
  PETREL_ASSIGN_OR_RETURN(const std::vector<size_t> arenas,
                          ArenaBytesPerBackend(model, all, 2, ubatch_tokens));
  plan.activation_bytes = arenas.size() > 1 ? arenas[1] : 0;
  return plan;
}

}  // namespace petrel
