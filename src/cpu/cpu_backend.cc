// CreateCpuBackend: a HostBackend over the Highway kernel table.
#include "cpu/cpu_backend.h"

#include "cpu/attention/attention_split.h"
#include "cpu/host_backend.h"
#include "cpu/kernels.h"
#include "cpu/matmul/bf16_dot.h"  // Bf16DotSupported

namespace petrel {

Result<std::unique_ptr<Backend>> CreateCpuBackend(BackendId id, size_t n_threads,
                                                  bool pin_threads, bool shared_prefix_attention,
                                                  Bf16Dot bf16_dot) {
  if (n_threads == 0 || n_threads > 1024) return Error("thread count %zu is invalid", n_threads);
  auto backend = std::make_unique<HostBackend>(
      "cpu", id,
      bf16_dot == Bf16Dot::kOff || !cpu::Bf16DotSupported()
          ? cpu::CpuKernels()
          : cpu::CpuKernelsWithBf16Dot(bf16_dot == Bf16Dot::kAll),
                                               &cpu::SupportsWeightType, n_threads);
  if (!backend->pool().start_error().empty()) {
    return Error("cpu backend: %s", backend->pool().start_error().c_str());
  }
  if (pin_threads) backend->pool().PinThreads();
  backend->SetAttentionSplitKernels(&cpu::CpuAttentionSplitKernels());
  backend->SetSharedPrefixAttention(shared_prefix_attention);
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace petrel
