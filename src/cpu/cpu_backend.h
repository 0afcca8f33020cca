// The CPU backend: Highway kernels with dynamic dispatch, our thread pool.
#pragma once

#include <memory>

#include "core/runtime/backend.h"
#include "core/runtime/backend_registry.h"  // Bf16Dot

namespace petrel {

// `shared_prefix_attention`, `bf16_dot`: BackendOptions'.
Result<std::unique_ptr<Backend>> CreateCpuBackend(BackendId id, size_t n_threads, bool pin_threads,
                                                  bool shared_prefix_attention = true,
                                                  Bf16Dot bf16_dot = Bf16Dot::kBf16Weights);

}  // namespace petrel
