// Records a batch's work into command buffers and submits it: compute dispatches with their
// descriptor sets, buffer copies, uploads of host data, readbacks to host memory, and (when
// profiling) a timestamp pair around each dispatch. Work recorded between two Submit() calls is
// one command buffer and one queue submission; Wait() finishes everything submitted, completes
// the readbacks, and recycles descriptor sets, upload space and command buffers.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/graph/ops.h"
#include "core/runtime/backend.h"  // OpProfile
#include "vulkan/device_memory.h"
#include "vulkan/pipelines.h"

namespace petrel::vk {

// A bump allocator over host-visible buffers for data the device reads: Take copies host bytes
// in and returns their range; Reset makes all of it free again (once no recorded work reads it).
class UploadArena {
 public:
  explicit UploadArena(MemoryPool& pool) : pool_(pool) {}
  Result<BufferRange> Take(const void* data, size_t bytes);
  // Space without contents (readback targets); `host` gets its mapped address.
  Result<BufferRange> Reserve(size_t bytes, char** host);
  void Reset();

 private:
  MemoryPool& pool_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  size_t current_ = 0;  // buffer being filled
  size_t used_ = 0;     // bytes used of buffers_[current_]
};

class Recorder {
 public:
  Recorder(VulkanDevice& device, Pipelines& pipelines, MemoryPool& upload_pool,
           MemoryPool& readback_pool);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Records `shader` over groups (x, y, z) with `bindings` at bindings 0..n-1 and `push` as its
  // push constants, after every earlier recorded write (one barrier per dispatch: correctness
  // first). Fails naming the shader when a count exceeds the device's workgroup-count limit;
  // ops with more rows than that fold them into y (see shaders/common.glsl).
  Status Dispatch(OpKind op, std::string_view shader, std::span<const uint32_t> spec,
                  std::span<const BufferRange> bindings, const void* push, size_t push_bytes,
                  std::array<uint32_t, 3> groups);
  template <typename Push>
  Status Dispatch(OpKind op, std::string_view shader, std::span<const uint32_t> spec,
                  std::span<const BufferRange> bindings, const Push& push,
                  std::array<uint32_t, 3> groups) {
    return Dispatch(op, shader, spec, bindings, &push, sizeof(Push), groups);
  }

  // Host bytes for dispatches recorded before the next Wait(), copied now.
  Result<BufferRange> Upload(const void* data, size_t bytes) { return per_wait_.Take(data, bytes); }
  // Device-to-device copy, after earlier work.
  Status Copy(const BufferRange& src, const BufferRange& dst);
  // Host bytes into a device range, after earlier work (the bytes are copied now).
  Status CopyFromHost(const void* host, const BufferRange& dst);
  // A device range into host memory, after earlier work; the host bytes are written by Wait().
  Status CopyToHost(const BufferRange& src, void* host);

  // Submits what was recorded since the last Submit (nothing if nothing was).
  Status Submit();
  // Submits, waits for every submission, then completes readbacks and recycles.
  Status Wait();
  bool idle() const { return !recording_ && in_flight_.empty(); }

  void EnableProfiling(bool enabled) { profiling_ = enabled && device_.caps().timestamps; }
  // One node of `op` recorded (an op may take several dispatches: profiles count nodes).
  void CountNode(OpKind op) {
    if (profiling_) ++nodes_[size_t(op)];
  }
  std::vector<OpProfile> TakeProfile();

 private:
  Status Begin();  // a command buffer to record into
  void Barrier();
  Result<VkDescriptorSet> AllocateSet(const Pipeline& pipeline);

  VulkanDevice& device_;
  Pipelines& pipelines_;
  UploadArena per_wait_;
  UploadArena readback_;
  VkCommandPool command_pool_ = VK_NULL_HANDLE;
  std::vector<VkCommandBuffer> free_buffers_;
  VkCommandBuffer recording_ = VK_NULL_HANDLE;
  struct InFlight {
    VkCommandBuffer buffer;
    VkFence fence;
  };
  std::vector<InFlight> in_flight_;
  std::vector<VkFence> free_fences_;
  std::vector<VkDescriptorPool> descriptor_pools_;
  size_t current_pool_ = 0;
  struct PendingRead {
    const char* staged;
    void* host;
    size_t bytes;
  };
  std::vector<PendingRead> reads_;
  // Profiling: a query pool of timestamp pairs, one pair per timed dispatch.
  bool profiling_ = false;
  VkQueryPool queries_ = VK_NULL_HANDLE;
  uint32_t queries_used_ = 0;
  std::vector<OpKind> timed_ops_;  // per pair
  std::array<OpProfile, size_t(OpKind::kCount)> profile_ = {};
  std::array<size_t, size_t(OpKind::kCount)> nodes_ = {};
  // The count is process-wide: errors of an earlier device's work are not this recorder's.
  size_t validation_errors_seen_ = VulkanDevice::validation_errors();
};

}  // namespace petrel::vk
