// The CPU backend: Highway kernels with dynamic dispatch, our thread pool.
#pragma once

#include <memory>

#include "core/runtime/backend.h"

namespace petrel {

// `shared_prefix_attention`, `bf16_dot`: BackendOptions'.
Result<std::unique_ptr<Backend>> CreateCpuBackend(BackendId id, size_t n_threads, bool pin_threads,
                                                  bool shared_prefix_attention = true,
                                                  bool bf16_dot = false);

}  // namespace petrel
