// Instance creation, device enumeration and choice, logical device and queue.
#include "vulkan/vulkan_device.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

namespace petrel::vk {
namespace {

std::atomic<size_t> g_validation_errors{0};
std::mutex g_validation_mutex;
std::string g_first_validation_error;

VKAPI_ATTR VkBool32 VKAPI_CALL OnValidationMessage(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT,
    const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
  if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
    {
      std::lock_guard<std::mutex> lock(g_validation_mutex);
      if (g_first_validation_error.empty()) g_first_validation_error = data->pMessage;
    }
    ++g_validation_errors;
    std::fprintf(stderr, "vulkan validation: %s\n", data->pMessage);
  }
  return VK_FALSE;
}

bool WantValidation() {
  const char* env = std::getenv("PETREL_VULKAN_VALIDATION");
  return env && std::strcmp(env, "1") == 0;
}

bool HasLayer(const char* name) {
  uint32_t n = 0;
  if (vkEnumerateInstanceLayerProperties(&n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> layers(n);
  if (vkEnumerateInstanceLayerProperties(&n, layers.data()) != VK_SUCCESS) return false;
  for (const VkLayerProperties& layer : layers) {
    if (std::strcmp(layer.layerName, name) == 0) return true;
  }
  return false;
}

bool HasDeviceExtension(VkPhysicalDevice physical, const char* name) {
  uint32_t n = 0;
  if (vkEnumerateDeviceExtensionProperties(physical, nullptr, &n, nullptr) != VK_SUCCESS)
    return false;
  std::vector<VkExtensionProperties> extensions(n);
  if (vkEnumerateDeviceExtensionProperties(physical, nullptr, &n, extensions.data()) != VK_SUCCESS)
    return false;
  for (const VkExtensionProperties& extension : extensions) {
    if (std::strcmp(extension.extensionName, name) == 0) return true;
  }
  return false;
}

constexpr const char* kNoDevice = "no Vulkan device; run without --device or install a driver";

// An instance for Vulkan 1.1 (subgroup properties), with the validation layer when wanted.
Result<VkInstance> CreateInstance(bool validation) {
  VkApplicationInfo app = {};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "petrel";
  app.pEngineName = "petrel";
  app.apiVersion = VK_API_VERSION_1_1;
  std::vector<const char*> layers, extensions;
  if (validation) {
    layers.push_back("VK_LAYER_KHRONOS_validation");
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  }
  VkInstanceCreateInfo info = {};
  info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  info.pApplicationInfo = &app;
  info.enabledLayerCount = uint32_t(layers.size());
  info.ppEnabledLayerNames = layers.data();
  info.enabledExtensionCount = uint32_t(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  VkInstance instance = VK_NULL_HANDLE;
  const VkResult result = vkCreateInstance(&info, nullptr, &instance);
  // No loader or no driver (VK_ERROR_INCOMPATIBLE_DRIVER) reads the same to a user.
  if (result != VK_SUCCESS) return Error("%s", kNoDevice);
  return instance;
}

Result<std::vector<VkPhysicalDevice>> PhysicalDevices(VkInstance instance) {
  uint32_t n = 0;
  if (vkEnumeratePhysicalDevices(instance, &n, nullptr) != VK_SUCCESS || n == 0)
    return Error("%s", kNoDevice);
  std::vector<VkPhysicalDevice> devices(n);
  PETREL_VK_RETURN_IF_ERROR(vkEnumeratePhysicalDevices(instance, &n, devices.data()));
  devices.resize(n);
  return devices;
}

// The first queue family with compute.
std::optional<uint32_t> ComputeFamily(VkPhysicalDevice physical, bool* timestamps) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &n, families.data());
  for (uint32_t i = 0; i < n; ++i) {
    if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      *timestamps = families[i].timestampValidBits > 0;
      return i;
    }
  }
  return std::nullopt;
}

DeviceCaps ReadCaps(VkPhysicalDevice physical) {
  VkPhysicalDeviceSubgroupProperties subgroup = {};
  subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
  VkPhysicalDeviceProperties2 props2 = {};
  props2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  props2.pNext = &subgroup;
  vkGetPhysicalDeviceProperties2(physical, &props2);
  const VkPhysicalDeviceProperties& props = props2.properties;
  DeviceCaps caps;
  caps.name = props.deviceName;
  caps.type = props.deviceType;
  caps.api_version = props.apiVersion;
  const bool arithmetic = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                          (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  caps.subgroup_size = arithmetic ? subgroup.subgroupSize : 0;
  bool queue_timestamps = false;
  ComputeFamily(physical, &queue_timestamps);
  caps.timestamps = queue_timestamps && props.limits.timestampPeriod > 0.0f;
  caps.timestamp_period_ns = props.limits.timestampPeriod;
  caps.max_storage_buffer_range = props.limits.maxStorageBufferRange;
  caps.min_storage_buffer_offset_alignment = std::max<uint64_t>(1, props.limits.minStorageBufferOffsetAlignment);
  caps.max_push_constants = props.limits.maxPushConstantsSize;
  caps.max_workgroup_size_x = props.limits.maxComputeWorkGroupSize[0];
  for (int i = 0; i < 3; ++i) caps.max_workgroup_count[i] = props.limits.maxComputeWorkGroupCount[i];
  caps.max_shared_memory = props.limits.maxComputeSharedMemorySize;
  VkPhysicalDeviceMemoryProperties memory;
  vkGetPhysicalDeviceMemoryProperties(physical, &memory);
  for (uint32_t h = 0; h < memory.memoryHeapCount; ++h) {
    if (memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      caps.device_local_bytes = std::max<size_t>(caps.device_local_bytes, memory.memoryHeaps[h].size);
  }
  for (uint32_t t = 0; t < memory.memoryTypeCount; ++t) {
    const VkMemoryPropertyFlags both =
        VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
    if ((memory.memoryTypes[t].propertyFlags & both) == both &&
        memory.memoryHeaps[memory.memoryTypes[t].heapIndex].size == caps.device_local_bytes) {
      caps.unified_memory = true;
    }
  }
  return caps;
}

int TypeRank(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

const char* TypeName(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

}  // namespace

const char* ResultName(VkResult result) {
  switch (result) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VkResult";
  }
}

Status CallError(const char* call, VkResult result) {
  // "vkAllocateMemory(device, ...)" -> "vkAllocateMemory".
  const char* paren = std::strchr(call, '(');
  const int n = paren ? int(paren - call) : int(std::strlen(call));
  if (result == VK_ERROR_OUT_OF_DEVICE_MEMORY)
    return Error("out of device memory (%.*s)", n, call);
  return Error("vulkan: %.*s failed: %s (%d)", n, call, ResultName(result), int(result));
}

Result<std::vector<DeviceCaps>> EnumerateDevices() {
  PETREL_ASSIGN_OR_RETURN(VkInstance instance, CreateInstance(false));
  auto physical = PhysicalDevices(instance);
  std::vector<DeviceCaps> devices;
  if (physical.ok()) {
    for (VkPhysicalDevice device : *physical) devices.push_back(ReadCaps(device));
  }
  vkDestroyInstance(instance, nullptr);
  if (!physical.ok()) return physical.status();
  return devices;
}

DeviceDescription Describe(const DeviceCaps& caps) {
  DeviceDescription description;
  description.name = caps.name;
  description.type = TypeName(caps.type);
  description.memory_bytes = caps.device_local_bytes;
  char features[160];
  std::snprintf(features, sizeof features, "Vulkan %u.%u, %s%s%s",
                VK_API_VERSION_MAJOR(caps.api_version), VK_API_VERSION_MINOR(caps.api_version),
                caps.subgroup_size ? ("subgroups of " + std::to_string(caps.subgroup_size)).c_str()
                                   : "no subgroup arithmetic",
                caps.timestamps ? ", timestamps" : "", caps.unified_memory ? ", unified memory" : "");
  description.features = features;
  return description;
}

size_t BestDevice(const std::vector<DeviceCaps>& devices) {
  size_t best = 0;
  for (size_t i = 1; i < devices.size(); ++i) {
    if (TypeRank(devices[i].type) < TypeRank(devices[best].type)) best = i;
  }
  return best;
}

Result<std::unique_ptr<VulkanDevice>> VulkanDevice::Open(int index) {
  std::unique_ptr<VulkanDevice> self(new VulkanDevice());
  const bool validation = WantValidation() && HasLayer("VK_LAYER_KHRONOS_validation");
  PETREL_ASSIGN_OR_RETURN(self->instance_, CreateInstance(validation));
  if (validation) {
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(self->instance_, "vkCreateDebugUtilsMessengerEXT"));
    if (create) {
      VkDebugUtilsMessengerCreateInfoEXT info = {};
      info.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
      info.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT |
                             VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT;
      info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
      info.pfnUserCallback = &OnValidationMessage;
      create(self->instance_, &info, nullptr, &self->messenger_);
    }
  }
  PETREL_ASSIGN_OR_RETURN(std::vector<VkPhysicalDevice> physical, PhysicalDevices(self->instance_));
  std::vector<DeviceCaps> all;
  for (VkPhysicalDevice device : physical) all.push_back(ReadCaps(device));
  if (index >= int(physical.size())) {
    std::string list;
    for (size_t i = 0; i < all.size(); ++i)
      list += (i ? ", " : "") + std::to_string(i) + ": " + all[i].name;
    return Error("--device vulkan:%d: this machine has %zu Vulkan device%s (%s)", index,
                 physical.size(), physical.size() == 1 ? "" : "s", list.c_str());
  }
  self->index_ = index < 0 ? BestDevice(all) : size_t(index);
  self->physical_ = physical[self->index_];
  self->caps_ = all[self->index_];
  vkGetPhysicalDeviceMemoryProperties(self->physical_, &self->memory_);
  bool timestamps = false;
  const std::optional<uint32_t> family = ComputeFamily(self->physical_, &timestamps);
  if (!family) return Error("vulkan: %s has no compute queue", self->caps_.name.c_str());
  self->queue_family_ = *family;
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue_info = {};
  queue_info.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  queue_info.queueFamilyIndex = *family;
  queue_info.queueCount = 1;
  queue_info.pQueuePriorities = &priority;
  std::vector<const char*> extensions;
  self->memory_budget_ = HasDeviceExtension(self->physical_, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  if (self->memory_budget_) extensions.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  // Importing host memory only pays where the device reads host memory at full speed (unified
  // memory); a discrete GPU would read every weight over the bus on every token.
  if (self->caps_.unified_memory &&
      HasDeviceExtension(self->physical_, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME)) {
    VkPhysicalDeviceExternalMemoryHostPropertiesEXT host = {};
    host.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT;
    VkPhysicalDeviceProperties2 props = {};
    props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    props.pNext = &host;
    vkGetPhysicalDeviceProperties2(self->physical_, &props);
    if (host.minImportedHostPointerAlignment > 0) {
      extensions.push_back(VK_KHR_EXTERNAL_MEMORY_EXTENSION_NAME);
      extensions.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
      self->caps_.host_import_alignment = size_t(host.minImportedHostPointerAlignment);
    }
  }
  VkDeviceCreateInfo info = {};
  info.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &queue_info;
  info.enabledExtensionCount = uint32_t(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  PETREL_VK_RETURN_IF_ERROR(vkCreateDevice(self->physical_, &info, nullptr, &self->device_));
  vkGetDeviceQueue(self->device_, *family, 0, &self->queue_);
  return self;
}

VulkanDevice::~VulkanDevice() {
  if (device_) vkDestroyDevice(device_, nullptr);
  if (messenger_) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy) destroy(instance_, messenger_, nullptr);
  }
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

Result<uint32_t> VulkanDevice::MemoryType(uint32_t type_bits, VkMemoryPropertyFlags required,
                                          VkMemoryPropertyFlags preferred) const {
  std::optional<uint32_t> fallback;
  for (uint32_t t = 0; t < memory_.memoryTypeCount; ++t) {
    if (!(type_bits & (1u << t))) continue;
    const VkMemoryPropertyFlags flags = memory_.memoryTypes[t].propertyFlags;
    if ((flags & required) != required) continue;
    if ((flags & preferred) == preferred) return t;
    if (!fallback) fallback = t;
  }
  if (fallback) return *fallback;
  return Error("vulkan: %s has no memory type with flags 0x%x", caps_.name.c_str(),
               unsigned(required));
}

size_t VulkanDevice::FreeMemory() const {
  if (memory_budget_) {
    VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = {};
    budget.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT;
    VkPhysicalDeviceMemoryProperties2 props = {};
    props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2;
    props.pNext = &budget;
    vkGetPhysicalDeviceMemoryProperties2(physical_, &props);
    size_t best = 0;
    for (uint32_t h = 0; h < props.memoryProperties.memoryHeapCount; ++h) {
      if (!(props.memoryProperties.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)) continue;
      const size_t free = budget.heapBudget[h] > budget.heapUsage[h]
                              ? size_t(budget.heapBudget[h] - budget.heapUsage[h])
                              : 0;
      best = std::max(best, free);
    }
    if (best > 0) return best;
  }
  const size_t used = allocated_ > 0 ? size_t(allocated_) : 0;
  return caps_.device_local_bytes > used ? caps_.device_local_bytes - used : 0;
}

uint32_t VulkanDevice::HostPointerMemoryTypes(const void* host) const {
  if (caps_.host_import_alignment == 0) return 0;
  auto get = reinterpret_cast<PFN_vkGetMemoryHostPointerPropertiesEXT>(
      vkGetDeviceProcAddr(device_, "vkGetMemoryHostPointerPropertiesEXT"));
  if (!get) return 0;
  VkMemoryHostPointerPropertiesEXT props = {};
  props.sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT;
  if (get(device_, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, host, &props) != VK_SUCCESS)
    return 0;
  return props.memoryTypeBits;
}

size_t VulkanDevice::validation_errors() { return g_validation_errors.load(); }

std::string VulkanDevice::first_validation_error() {
  std::lock_guard<std::mutex> lock(g_validation_mutex);
  return g_first_validation_error;
}

}  // namespace petrel::vk
