// The CPU backend: Highway kernels with dynamic dispatch, our thread pool.
#pragma once

#include <memory>

#include "core/runtime/backend.h"

namespace petrel {

// `shared_prefix_attention`: BackendOptions::shared_prefix_attention.
Result<std::unique_ptr<Backend>> CreateCpuBackend(BackendId id, size_t n_threads, bool pin_threads,
                                                  bool shared_prefix_attention = true);

}  // namespace petrel
