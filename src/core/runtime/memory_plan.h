// What placing blocks on a device costs in its memory, from the model's tensor sizes, the KV
// cache's shape and the activation arenas' layout alone: nothing is allocated or uploaded to
// compute it. One plan serves `--gpu-layers auto`, `petrel info --device` and the engine's
// check before it uploads anything.
#pragma once

#include <cstddef>
#include <vector>

#include "core/base/status.h"
#include "core/model/loader.h"
#include "core/runtime/kv_cache.h"  // KvCacheOptions
#include "core/runtime/placement.h"

namespace petrel {

struct DeviceMemoryPlan {
  std::vector<size_t> layer_weight_bytes;  // per block, every weight of the block
  // Per block, per weight of the family's table: its bytes (a fused tensor's parts 0, the
  // whole counted once), for weights placed apart from their block.
  std::vector<std::vector<size_t>> weight_bytes;
  size_t output_weight_bytes = 0;          // final norm and output projection
  size_t kv_bytes_per_token = 0;           // K and V rows of one token, in one layer
  size_t kv_tokens = 0;                    // token slots of the cache (blocks x block_tokens)
  size_t activation_bytes = 0;             // the device's arena for one micro-batch
  size_t ubatch_tokens = 0;                // the micro-batch the arena is sized for

  size_t n_layers() const { return layer_weight_bytes.size(); }
  size_t LayerKvBytes() const { return kv_bytes_per_token * kv_tokens; }
  // Device bytes of a placement: the weights that live on `device` (Placement::OfWeight), the
  // KV storage of the blocks that run there (and the output head), plus the activation arena
  // when anything is there.
  size_t DeviceBytes(const Placement& placement, BackendId device) const;
  // The weight bytes alone of the same.
  size_t DeviceWeightBytes(const Placement& placement, BackendId device) const;
  // The same for Placement::Offload(n_layers(), device, device_layers).
  size_t OffloadBytes(size_t device_layers) const;
  // Bytes kept free for what the plan does not count: the driver's own allocations, pipelines,
  // staging buffers, fragmentation of the device heap.
  static size_t Margin(size_t free_bytes);
  // `--gpu-layers auto`: the most blocks whose OffloadBytes fit `free_bytes` less the margin;
  // n_layers() + 1 when the output head fits as well (every block and the head).
  size_t FitLayers(size_t free_bytes) const;
};

// Activation arena bytes per backend of one pass of `tokens` tokens under `placement` (from the
// graph of the model's host weights; only sizes are read).
Result<std::vector<size_t>> ArenaBytesPerBackend(const LoadedModel& model,
                                                 const Placement& placement, size_t n_backends,
                                                 size_t tokens);

// The default micro-batch (EngineOptions::ubatch_tokens = 0) for `placement`: see
// PickMicroBatch and Engine::kActivationShare.
Result<size_t> DefaultMicroBatch(const LoadedModel& model, const Placement& placement,
                                 size_t n_backends, size_t max_batch_tokens);

// The plan for a device that would be backend 1 next to the CPU, with the KV cache `kv`
// (n_blocks set) and passes of `ubatch_tokens` tokens.
Result<DeviceMemoryPlan> PlanDeviceMemory(const LoadedModel& model, const KvCacheOptions& kv,
                                          size_t ubatch_tokens);

}  // namespace petrel
