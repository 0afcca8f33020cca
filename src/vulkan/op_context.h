// What an op's recording function is given: the recorder, the device's capabilities, the
// batch (host arrays and their device copies), and the device ranges behind values, weights and
// KV storage.
#pragma once

#include <algorithm>
#include <array>

#include "core/graph/graph.h"
#include "core/runtime/backend.h"
#include "vulkan/device_memory.h"
#include "vulkan/recorder.h"

namespace petrel::vk {

// The batch's host arrays (BatchContext) uploaded once per batch, each an int32 array.
struct DeviceBatch {
  BufferRange tokens, positions, token_seq, block_tables, block_table_begin, n_ctx, kv_slot,
      selected_rows;
};

// The device buffer behind a value, a prepared weight or a KV layer: every BackendBuffer this
// backend hands out is a DeviceBuffer, and PrepareWeight's views point at one.
inline const DeviceBuffer& AsDevice(const BackendBuffer& buffer) {
  return static_cast<const DeviceBuffer&>(buffer);
}
inline BufferRange ValueRange(const ValueView& value) {
  return AsDevice(*value.buffer).Range(value.offset, value.desc.bytes());
}
inline BufferRange WeightRange(const TensorView& weight) {
  return static_cast<const DeviceBuffer*>(weight.data)->Whole();
}

// A grid of n_groups workgroups, folded into y past the device's x limit; shaders take
// FlatGroupId() (shaders/common.glsl) and return when it is n_groups or more.
inline std::array<uint32_t, 3> FoldGroups(size_t n_groups, const DeviceCaps& caps) {
  const size_t max_x = std::max<uint32_t>(1, caps.max_workgroup_count[0]);
  if (n_groups <= max_x) return {uint32_t(std::max<size_t>(n_groups, 1)), 1, 1};
  return {uint32_t(max_x), uint32_t((n_groups + max_x - 1) / max_x), 1};
}

constexpr size_t kScratchSlots = 3;

struct OpContext {
  Recorder& recorder;
  const DeviceCaps& caps;
  const BatchContext& batch;
  const DeviceBatch& device_batch;
  // This batch's RoPE cos/sin table for `inv_freq` (pairs values): (n_tokens, pairs) cos values
  // then (n_tokens, pairs) sin values, computed on the host in double precision once per batch
  // and frequency table (as the CPU backend does), so every backend rotates by the same angles.
  Result<BufferRange> (*rope_table)(void* backend, const double* inv_freq, size_t pairs);
  void* backend;
  // The IQ codebooks (WeightGridWords()), bound by every weight op after its own buffers.
  BufferRange weight_grids;
  // Device scratch of at least `bytes` for an op's intermediate values (moe_ffn's routes and
  // expert rows), one buffer per `slot` (< kScratchSlots). It stays valid until the next batch;
  // the op after the next dispatch may reuse it (dispatches run in order, one barrier each).
  Result<BufferRange> (*scratch)(void* backend, size_t slot, size_t bytes);
  Result<BufferRange> RopeTable(const double* inv_freq, size_t pairs) const {
    return rope_table(backend, inv_freq, pairs);
  }
  Result<BufferRange> Scratch(size_t slot, size_t bytes) const {
    return scratch(backend, slot, bytes);
  }
};

}  // namespace petrel::vk
