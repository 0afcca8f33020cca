// The Vulkan backend: weights uploaded once at load, KV blocks and activations in device
// memory, each batch's nodes recorded into command buffers and submitted per segment.
#pragma once

#include <memory>

#include "core/runtime/backend_registry.h"

namespace petrel {

// Opens device `options.device_index` (-1: the best) and makes a backend on it; fails with one
// line when there is no loader, driver or device.
Result<std::unique_ptr<Backend>> CreateVulkanBackend(BackendId id, const BackendOptions& options);
Result<std::vector<DeviceDescription>> ListVulkanDevices();

}  // namespace petrel
