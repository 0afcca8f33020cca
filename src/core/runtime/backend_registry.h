// Creating backends by name: "cpu", "ref" (and later "vulkan", "cuda"). The runtime knows
// backends only through this list; src/backends.cc, the one file that names them, fills it.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/runtime/backend.h"

namespace petrel {

// Which float weights the CPU multiplies with AVX512-BF16's `vdpbf16ps` (cpu/matmul/bf16_dot.h),
// activations rounded to bfloat16, in every batch size (still batch-invariant), where the CPU
// has it; elsewhere all of them take the f32 path (`--bf16-dot`).
enum class Bf16Dot {
  kOff,          // none: F16 and BF16 weights widened to f32
  kBf16Weights,  // BF16 weights (`auto`, the default): bfloat16 is their own precision, and
                 // rounding the activations to it is how BF16 models are run elsewhere
                 // (llama.cpp on such CPUs, PyTorch in bfloat16); F16 stays exact in f32
  kAll,          // F16 too, rounded to bfloat16 (`on`): faster prompts, other bits
};

struct BackendOptions {
  size_t n_threads = 1;
  bool pin_threads = false;
  int device_index = -1;  // `--device vulkan:N`: the Nth device; -1 picks the best one
  // CPU: decode steps read KV blocks that running sequences share once for all of them
  // (the same bits either way; off only to measure it).
  bool shared_prefix_attention = true;
  // CPU: the float weights multiplied with `vdpbf16ps` (Bf16Dot).
  Bf16Dot bf16_dot = Bf16Dot::kBf16Weights;
};

// One device a backend can run on, for `petrel info --devices`.
struct DeviceDescription {
  std::string name;      // "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string type;      // "discrete", "integrated", "virtual", "cpu", "other"
  size_t memory_bytes = 0;
  std::string features;  // what petrel uses of it: "subgroups 8, fp16, timestamps"
};

struct BackendFactory {
  const char* name;
  Result<std::unique_ptr<Backend>> (*create)(BackendId id, const BackendOptions& options);
  // The devices this backend can use (an error when its driver or loader is missing); null for
  // backends that run on the host.
  Result<std::vector<DeviceDescription>> (*list_devices)();
};

// The backends compiled into this build, "cpu" first. Defined in src/backends.cc.
std::span<const BackendFactory> CompiledBackends();

// Adds a backend at run time (tests register limited or instrumented backends this way). Fails
// when the name is taken. Not thread-safe: register before loading models.
Status RegisterBackend(const BackendFactory& factory);

// Names of the backends compiled in or registered, "cpu" first.
std::vector<std::string> AvailableBackends();

// A `--device` value split into the backend's name and the device index after a colon:
// "vulkan:1" is {"vulkan", 1}, "vulkan" is {"vulkan", -1}. Fails on an index that is not a
// non-negative number ("vulkan:x", "vulkan:").
struct DeviceSpec {
  std::string backend;
  int index = -1;
};
Result<DeviceSpec> ParseDeviceSpec(std::string_view device);

// How messages name a backend's devices: "Vulkan" for "vulkan", "CUDA" for "cuda".
std::string DeviceKindName(std::string_view backend);

// The registered factory of backend `name` (without a device index); null when unknown.
const BackendFactory* FindBackend(std::string_view name);

// Creates the backend `device` names ("cpu", "vulkan", "vulkan:1"). The index, when given,
// overrides options.device_index and is checked against the backend's device list first, so that
// a wrong one is one line listing the devices there are.
Result<std::unique_ptr<Backend>> CreateBackend(std::string_view device, BackendId id,
                                               const BackendOptions& options);

}  // namespace petrel
