// The only file that names the backends: the list the runtime's registry creates them from.
// Adding a backend is its folder, its line here and its dependency in src/meson.build.
#include "core/runtime/backend_registry.h"
#include "cpu/cpu_backend.h"
#include "ref/ref_backend.h"
#if PETREL_HAS_VULKAN
#include "vulkan/vulkan_backend.h"
#endif
#if PETREL_HAS_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace petrel {

std::span<const BackendFactory> CompiledBackends() {
  static constexpr BackendFactory kBackends[] = {
      {"cpu",
       [](BackendId id, const BackendOptions& options) {
         return CreateCpuBackend(id, options.n_threads, options.pin_threads,
                                 options.shared_prefix_attention, options.bf16_dot);
       },
       nullptr},
      {"ref", [](BackendId id, const BackendOptions&) { return CreateRefBackend(id); }, nullptr},
#if PETREL_HAS_VULKAN
      {"vulkan", &CreateVulkanBackend, &ListVulkanDevices},
#endif
#if PETREL_HAS_CUDA
      {"cuda", &CreateCudaBackend, &ListCudaDevices},
#endif
  };
  return kBackends;
}

}  // namespace petrel
