// MemoryPool: chunks of device memory, each bound to one buffer, carved first-fit with
// coalescing free lists.
#include "vulkan/device_memory.h"

#include <algorithm>

namespace petrel::vk {
namespace {

size_t AlignUp(size_t value, size_t alignment) { return (value + alignment - 1) / alignment * alignment; }

// Storage and transfer: every buffer may be bound to a shader and copied from and to.
constexpr VkBufferUsageFlags kUsage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT;

}  // namespace

DeviceBuffer::~DeviceBuffer() {
  if (pool_) pool_->Free(chunk_, size_t(offset_), bytes_);
}

MemoryPool::MemoryPool(VulkanDevice& device, MemoryKind kind, size_t chunk_bytes)
    : device_(device), kind_(kind), chunk_bytes_(chunk_bytes), alignment_(256) {}

MemoryPool::~MemoryPool() {
  for (Chunk& chunk : chunks_) Release(chunk);
}

void MemoryPool::Release(Chunk& chunk) {
  if (chunk.buffer) vkDestroyBuffer(device_.device(), chunk.buffer, nullptr);
  if (chunk.memory) {
    vkFreeMemory(device_.device(), chunk.memory, nullptr);
    if (kind_ == MemoryKind::kDevice && !chunk.imported) device_.NoteAllocated(-int64_t(chunk.bytes));
  }
  chunk = Chunk{};
}

size_t MemoryPool::allocated_bytes() const {
  size_t total = 0;
  for (const Chunk& chunk : chunks_) total += chunk.bytes;
  return total;
}

Result<size_t> MemoryPool::NewChunk(size_t bytes) {
  Chunk chunk;
  chunk.bytes = bytes;
  VkBufferCreateInfo info = {};
  info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  info.size = bytes;
  info.usage = kUsage;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  PETREL_VK_RETURN_IF_ERROR(vkCreateBuffer(device_.device(), &info, nullptr, &chunk.buffer));
  VkMemoryRequirements needs;
  vkGetBufferMemoryRequirements(device_.device(), chunk.buffer, &needs);
  VkMemoryPropertyFlags required = 0, preferred = 0;
  switch (kind_) {
    case MemoryKind::kDevice:
      required = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
      // Unified memory is also mapped, so uploads and readbacks can be plain copies.
      preferred = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
      break;
    case MemoryKind::kUpload:
      required = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
      preferred = required;
      break;
    case MemoryKind::kReadback:
      required = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
      preferred = required | VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
      break;
  }
  auto type = device_.MemoryType(needs.memoryTypeBits, required, preferred);
  if (!type.ok()) {
    vkDestroyBuffer(device_.device(), chunk.buffer, nullptr);
    return type.status();
  }
  VkMemoryAllocateInfo alloc = {};
  alloc.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  alloc.allocationSize = needs.size;
  alloc.memoryTypeIndex = *type;
  const VkResult allocated = vkAllocateMemory(device_.device(), &alloc, nullptr, &chunk.memory);
  if (allocated != VK_SUCCESS) {
    vkDestroyBuffer(device_.device(), chunk.buffer, nullptr);
    if (allocated == VK_ERROR_OUT_OF_DEVICE_MEMORY || allocated == VK_ERROR_OUT_OF_HOST_MEMORY) {
      return Error("out of device memory: %s cannot allocate %.1f MiB more",
                   device_.caps().name.c_str(), double(bytes) / (1 << 20));
    }
    return CallError("vkAllocateMemory", allocated);
  }
  if (kind_ == MemoryKind::kDevice) device_.NoteAllocated(int64_t(chunk.bytes));
  const VkResult bound = vkBindBufferMemory(device_.device(), chunk.buffer, chunk.memory, 0);
  if (bound != VK_SUCCESS) {
    Release(chunk);
    return CallError("vkBindBufferMemory", bound);
  }
  // Map every host-visible chunk once for its lifetime.
  const VkMemoryPropertyFlags flags = [&] {
    VkPhysicalDeviceMemoryProperties props;
    vkGetPhysicalDeviceMemoryProperties(device_.physical(), &props);
    return props.memoryTypes[*type].propertyFlags;
  }();
  if ((flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && (flags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)) {
    void* mapped = nullptr;
    if (vkMapMemory(device_.device(), chunk.memory, 0, VK_WHOLE_SIZE, 0, &mapped) == VK_SUCCESS)
      chunk.mapped = static_cast<char*>(mapped);
  }
  chunk.free.emplace(0, bytes);
  // Reuse a released slot so chunk indices held by live buffers stay valid.
  for (size_t i = 0; i < chunks_.size(); ++i) {
    if (chunks_[i].buffer == VK_NULL_HANDLE) {
      chunks_[i] = std::move(chunk);
      return i;
    }
  }
  chunks_.push_back(std::move(chunk));
  return chunks_.size() - 1;
}

Result<std::unique_ptr<DeviceBuffer>> MemoryPool::Allocate(size_t bytes) {
  const size_t size = AlignUp(std::max<size_t>(bytes, 1), alignment_);
  for (size_t c = 0; c < chunks_.size(); ++c) {
    Chunk& chunk = chunks_[c];
    if (chunk.imported) continue;
    for (auto it = chunk.free.begin(); it != chunk.free.end(); ++it) {
      if (it->second < size) continue;
      const size_t offset = it->first, rest = it->second - size;
      chunk.free.erase(it);
      if (rest) chunk.free.emplace(offset + size, rest);
      chunk.used += size;
      std::unique_ptr<DeviceBuffer> buffer(new DeviceBuffer());
      buffer->pool_ = this;
      buffer->chunk_ = c;
      buffer->buffer_ = chunk.buffer;
      buffer->offset_ = offset;
      buffer->bytes_ = bytes;
      buffer->mapped_ = chunk.mapped ? chunk.mapped + offset : nullptr;
      return buffer;
    }
  }
  PETREL_ASSIGN_OR_RETURN(const size_t c, NewChunk(std::max(size, chunk_bytes_)));
  (void)c;
  return Allocate(bytes);
}

Result<std::unique_ptr<DeviceBuffer>> MemoryPool::Import(const void* host, size_t bytes) {
  const size_t align = device_.caps().host_import_alignment;
  if (align == 0) return Error("vulkan: %s cannot import host memory", device_.caps().name.c_str());
  const uintptr_t begin = reinterpret_cast<uintptr_t>(host) / align * align;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(host) + bytes + align - 1) / align * align;
  // The buffer starts inside the imported pages, and a range is bound from there: a start that
  // is no valid binding offset (a safetensors tensor at any byte, a fused tensor's part) is copied.
  if ((reinterpret_cast<uintptr_t>(host) - begin) % device_.caps().min_storage_buffer_offset_alignment != 0)
    return Error("vulkan: host memory at %p is not aligned for binding", host);
  void* base = reinterpret_cast<void*>(begin);
  const uint32_t host_types = device_.HostPointerMemoryTypes(base);
  if (host_types == 0) return Error("vulkan: host memory at %p cannot be imported", base);
  Chunk chunk;
  chunk.bytes = size_t(end - begin);
  chunk.imported = true;
  VkExternalMemoryBufferCreateInfo external = {};
  external.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO;
  external.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  VkBufferCreateInfo info = {};
  info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  info.pNext = &external;
  info.size = chunk.bytes;
  info.usage = kUsage;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  PETREL_VK_RETURN_IF_ERROR(vkCreateBuffer(device_.device(), &info, nullptr, &chunk.buffer));
  VkMemoryRequirements needs;
  vkGetBufferMemoryRequirements(device_.device(), chunk.buffer, &needs);
  auto type = device_.MemoryType(needs.memoryTypeBits & host_types, 0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  if (!type.ok() || needs.size > chunk.bytes) {
    vkDestroyBuffer(device_.device(), chunk.buffer, nullptr);
    return Error("vulkan: no memory type for imported host memory");
  }
  VkImportMemoryHostPointerInfoEXT import = {};
  import.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT;
  import.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  import.pHostPointer = base;
  VkMemoryAllocateInfo alloc = {};
  alloc.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  alloc.pNext = &import;
  alloc.allocationSize = chunk.bytes;
  alloc.memoryTypeIndex = *type;
  VkResult result = vkAllocateMemory(device_.device(), &alloc, nullptr, &chunk.memory);
  if (result == VK_SUCCESS) result = vkBindBufferMemory(device_.device(), chunk.buffer, chunk.memory, 0);
  if (result != VK_SUCCESS) {
    Release(chunk);
    return CallError("vkAllocateMemory (host import)", result);
  }
  chunk.used = chunk.bytes;
  size_t c = chunks_.size();
  for (size_t i = 0; i < chunks_.size(); ++i) {
    if (chunks_[i].buffer == VK_NULL_HANDLE) c = i;
  }
  if (c == chunks_.size()) chunks_.emplace_back();
  chunks_[c] = std::move(chunk);
  std::unique_ptr<DeviceBuffer> buffer(new DeviceBuffer());
  buffer->pool_ = this;
  buffer->chunk_ = c;
  buffer->buffer_ = chunks_[c].buffer;
  buffer->offset_ = VkDeviceSize(reinterpret_cast<uintptr_t>(host) - begin);
  buffer->bytes_ = bytes;
  return buffer;
}

void MemoryPool::Free(size_t c, size_t offset, size_t bytes) {
  Chunk& chunk = chunks_[c];
  if (chunk.imported) {
    Release(chunk);
    return;
  }
  const size_t size = AlignUp(std::max<size_t>(bytes, 1), alignment_);
  auto [it, inserted] = chunk.free.emplace(offset, size);
  (void)inserted;
  // Coalesce with the neighbours.
  if (auto next = std::next(it); next != chunk.free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    chunk.free.erase(next);
  }
  if (it != chunk.free.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      chunk.free.erase(it);
    }
  }
  chunk.used -= size;
  // A chunk of its own (a large KV or arena buffer) goes back to the driver when empty, so
  // growing an arena does not keep the old one's memory.
  if (chunk.used == 0 && chunk.bytes > chunk_bytes_) Release(chunk);
}

}  // namespace petrel::vk
