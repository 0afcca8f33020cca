// Device memory: a sub-allocator over large VkDeviceMemory chunks, each with one VkBuffer
// spanning it, so weights, KV blocks and activation arenas are (buffer, offset) ranges of a few
// big allocations instead of thousands of small ones.
#pragma once

#include <vulkan/vulkan.h>

#include <map>
#include <memory>
#include <vector>

#include "core/runtime/backend.h"
#include "vulkan/vulkan_device.h"

namespace petrel::vk {

// A range of a VkBuffer, as a descriptor binds it.
struct BufferRange {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;
  VkDeviceSize bytes = 0;
};

enum class MemoryKind {
  kDevice,    // device-local (host-visible too where the device has unified memory)
  kUpload,    // host-visible, coherent: the host writes, the device reads
  kReadback,  // host-visible, cached where possible: the device writes, the host reads
};

class MemoryPool;

// A place in a pool: what Allocate hands out. Freed when destroyed.
class DeviceBuffer final : public BackendBuffer {
 public:
  ~DeviceBuffer() override;
  size_t bytes() const override { return bytes_; }
  // The bytes [offset, offset + bytes) of this buffer, for a descriptor or a copy.
  BufferRange Range(size_t offset, size_t bytes) const { return {buffer_, offset_ + offset, bytes}; }
  BufferRange Whole() const { return Range(0, bytes_); }
  // Host address of the buffer's first byte when its memory is mapped, else null.
  char* mapped() const { return mapped_; }

 private:
  friend class MemoryPool;
  DeviceBuffer() = default;
  MemoryPool* pool_ = nullptr;
  size_t chunk_ = 0;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceSize offset_ = 0;
  size_t bytes_ = 0;
  char* mapped_ = nullptr;
};

class MemoryPool {
 public:
  // Chunks of `chunk_bytes` (larger requests get a chunk of their own); every offset handed out
  // is a multiple of `alignment` (at least the device's storage-buffer offset alignment).
  MemoryPool(VulkanDevice& device, MemoryKind kind, size_t chunk_bytes);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  Result<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes);
  // The host bytes [host, host + bytes) themselves as device memory, without a copy (a chunk of
  // their own over the aligned pages around them); they must outlive the buffer. Fails when the
  // device cannot import them (then the caller copies).
  Result<std::unique_ptr<DeviceBuffer>> Import(const void* host, size_t bytes);
  MemoryKind kind() const { return kind_; }
  size_t allocated_bytes() const;  // in chunks

 private:
  friend class DeviceBuffer;
  struct Chunk {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkBuffer buffer = VK_NULL_HANDLE;
    size_t bytes = 0;
    char* mapped = nullptr;
    std::map<size_t, size_t> free;  // offset -> bytes, coalesced
    size_t used = 0;
    bool imported = false;          // host memory: one buffer, released with it
  };
  Result<size_t> NewChunk(size_t bytes);
  void Free(size_t chunk, size_t offset, size_t bytes);
  void Release(Chunk& chunk);

  VulkanDevice& device_;
  MemoryKind kind_;
  size_t chunk_bytes_;
  size_t alignment_;
  std::vector<Chunk> chunks_;
};

}  // namespace petrel::vk
