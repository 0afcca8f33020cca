// Creating backends by name: "cpu", "ref" (and later "vulkan", "cuda").
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.h"
#include "core/status.h"

namespace petrel {

struct BackendOptions {
  size_t n_threads = 1;
  bool pin_threads = false;
};

// Names of the backends compiled into this build, "cpu" first.
std::vector<std::string> AvailableBackends();
Result<std::unique_ptr<Backend>> CreateBackend(std::string_view name, BackendId id,
                                               const BackendOptions& options);

}  // namespace petrel
