// The CPU backend: Highway kernels with dynamic dispatch, our thread pool.
#pragma once

#include <memory>

#include "core/runtime/backend.h"

namespace petrel {

Result<std::unique_ptr<Backend>> CreateCpuBackend(BackendId id, size_t n_threads, bool pin_threads);

}  // namespace petrel
