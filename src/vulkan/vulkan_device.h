// One Vulkan device: the instance, the physical device chosen, its logical device and the one
// compute queue petrel records into. Everything else in src/vulkan borrows these handles.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/runtime/backend_registry.h"  // DeviceDescription

namespace petrel::vk {

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" for a VkResult.
const char* ResultName(VkResult result);
// An error naming the call that failed: "vkAllocateMemory: VK_ERROR_OUT_OF_DEVICE_MEMORY".
Status CallError(const char* call, VkResult result);
#define PETREL_VK_RETURN_IF_ERROR(call)                                          \
  do {                                                                            \
    const VkResult petrel_vk_result_ = (call);                                    \
    if (petrel_vk_result_ != VK_SUCCESS)                                          \
      return ::petrel::vk::CallError(#call, petrel_vk_result_);                   \
  } while (0)

// What petrel reads of a physical device.
struct DeviceCaps {
  std::string name;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t api_version = 0;
  size_t device_local_bytes = 0;      // the largest device-local heap
  uint32_t subgroup_size = 0;          // 0: no subgroup arithmetic in compute shaders
  bool timestamps = false;             // the compute queue can write timestamps
  float timestamp_period_ns = 0.0f;
  uint64_t max_storage_buffer_range = 0;
  uint64_t min_storage_buffer_offset_alignment = 1;  // of every bound range's offset
  uint32_t max_push_constants = 0;
  uint32_t max_workgroup_size_x = 0;
  uint32_t max_workgroup_count[3] = {0, 0, 0};
  uint32_t max_shared_memory = 0;
  bool unified_memory = false;         // device-local memory is host-visible (iGPU, lavapipe)
  // VK_EXT_external_memory_host: host memory (a mapped model file) usable as device memory in
  // place, for ranges aligned to this many bytes; 0 when the device cannot.
  size_t host_import_alignment = 0;
};

// Every device the loader finds, in the loader's order (the N of `--device vulkan:N`). Fails
// with one line when there is no loader, no driver, or no device.
Result<std::vector<DeviceCaps>> EnumerateDevices();
DeviceDescription Describe(const DeviceCaps& caps);
// The index of the device to use by default: discrete > integrated > virtual > CPU.
size_t BestDevice(const std::vector<DeviceCaps>& devices);

class VulkanDevice {
 public:
  // Opens device `index` (-1: BestDevice). The Khronos validation layer is enabled when
  // PETREL_VULKAN_VALIDATION=1 and the layer is installed; its messages go to stderr and count
  // as errors (validation_errors()).
  static Result<std::unique_ptr<VulkanDevice>> Open(int index);
  ~VulkanDevice();
  VulkanDevice(const VulkanDevice&) = delete;
  VulkanDevice& operator=(const VulkanDevice&) = delete;

  VkDevice device() const { return device_; }
  VkPhysicalDevice physical() const { return physical_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return queue_family_; }
  const DeviceCaps& caps() const { return caps_; }
  size_t index() const { return index_; }

  // A memory type allowed by `type_bits` with all `required` flags, preferring one that also
  // has `preferred`; an error when none has `required`.
  Result<uint32_t> MemoryType(uint32_t type_bits, VkMemoryPropertyFlags required,
                              VkMemoryPropertyFlags preferred) const;
  // Device-local bytes not yet used, from VK_EXT_memory_budget where the driver has it, else
  // the heap size less what this process allocated.
  size_t FreeMemory() const;
  void NoteAllocated(int64_t bytes) { allocated_ += bytes; }
  // vkGetMemoryHostPointerPropertiesEXT: the memory types host memory at `host` can be imported
  // as (0 when it cannot).
  uint32_t HostPointerMemoryTypes(const void* host) const;

  static size_t validation_errors();
  static std::string first_validation_error();

 private:
  VulkanDevice() = default;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  size_t index_ = 0;
  bool memory_budget_ = false;
  DeviceCaps caps_;
  VkPhysicalDeviceMemoryProperties memory_ = {};
  int64_t allocated_ = 0;
};

}  // namespace petrel::vk
