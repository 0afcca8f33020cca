// The CUDA backend: weights uploaded once at load, KV blocks and activations in device memory
// from a caching allocator, each batch's nodes launched on one stream.
#pragma once

#include <memory>
#include <vector>

#include "core/runtime/backend_registry.h"

namespace petrel {

// Opens device `options.device_index` (-1: the one with the most memory) and makes a backend on
// it; fails with one line ("no CUDA device: <reason>") when there is no driver or device.
Result<std::unique_ptr<Backend>> CreateCudaBackend(BackendId id, const BackendOptions& options);
Result<std::vector<DeviceDescription>> ListCudaDevices();

}  // namespace petrel
