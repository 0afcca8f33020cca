// The `ref` backend: scalar reference kernels on one thread; slow, simple, for debugging and for
// proving that layers can be placed on a second backend.
#pragma once

#include <memory>

#include "core/runtime/backend.h"

namespace petrel {

Result<std::unique_ptr<Backend>> CreateRefBackend(BackendId id);

}  // namespace petrel
