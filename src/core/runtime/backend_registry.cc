// Backend lookup by name over the compiled-in list.
#include "core/runtime/backend_registry.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace petrel {
namespace {

std::vector<BackendFactory>& Registered() {
  static std::vector<BackendFactory> registered;
  return registered;
}

std::vector<BackendFactory> AllBackends() {
  std::vector<BackendFactory> all(CompiledBackends().begin(), CompiledBackends().end());
  all.insert(all.end(), Registered().begin(), Registered().end());
  return all;
}

}  // namespace

Status RegisterBackend(const BackendFactory& factory) {
  for (const BackendFactory& known : AllBackends()) {
    if (std::string_view(known.name) == factory.name)
      return Error("a backend named '%s' is already registered", factory.name);
  }
  Registered().push_back(factory);
  return Status::Ok();
}

std::vector<std::string> AvailableBackends() {
  std::vector<std::string> names;
  for (const BackendFactory& factory : AllBackends()) names.emplace_back(factory.name);
  return names;
}

Result<DeviceSpec> ParseDeviceSpec(std::string_view device) {
  DeviceSpec spec;
  const size_t colon = device.find(':');
  spec.backend = std::string(device.substr(0, colon));
  if (colon == std::string_view::npos) return spec;
  const std::string index(device.substr(colon + 1));
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(index.c_str(), &end, 10);
  if (index.empty() || *end != '\0' || errno == ERANGE || value < 0 || value > 1 << 20 ||
      !std::isdigit(static_cast<unsigned char>(index[0]))) {
    return Error("--device %.*s: '%s' is not a device number (as in %s:0)", int(device.size()),
                 device.data(), index.c_str(), spec.backend.c_str());
  }
  spec.index = int(value);
  return spec;
}

const BackendFactory* FindBackend(std::string_view name) {
  for (const BackendFactory& factory : CompiledBackends()) {
    if (name == factory.name) return &factory;
  }
  for (const BackendFactory& factory : Registered()) {
    if (name == factory.name) return &factory;
  }
  return nullptr;
}

Result<std::unique_ptr<Backend>> CreateBackend(std::string_view device, BackendId id,
                                               const BackendOptions& options) {
  PETREL_ASSIGN_OR_RETURN(const DeviceSpec spec, ParseDeviceSpec(device));
  const BackendFactory* factory = FindBackend(spec.backend);
  if (!factory) {
    std::string known;
    for (const std::string& backend : AvailableBackends())
      known += (known.empty() ? "" : ", ") + backend;
    return Error("unknown device '%s' (this build has: %s)", spec.backend.c_str(), known.c_str());
  }
  if (spec.index < 0) return factory->create(id, options);
  if (!factory->list_devices) {
    // A host backend is one device: ":0" names it, any other index is a mistake.
    if (spec.index > 0) {
      return Error("--device %.*s: %s runs on the host and has only device 0", int(device.size()),
                   device.data(), spec.backend.c_str());
    }
    return factory->create(id, options);
  }
  PETREL_ASSIGN_OR_RETURN(const std::vector<DeviceDescription> devices, factory->list_devices());
  const std::string kind = DeviceKindName(spec.backend);
  if (devices.empty()) {
    return Error("no %s device; run without --device or install a driver", kind.c_str());
  }
  if (size_t(spec.index) >= devices.size()) {
    std::string list;
    for (size_t i = 0; i < devices.size(); ++i) {
      list += (i ? ", " : "") + std::to_string(i) + ": " + devices[i].name;
    }
    return Error("--device %.*s: this machine has %zu %s device%s (%s)", int(device.size()),
                 device.data(), devices.size(), kind.c_str(), devices.size() == 1 ? "" : "s",
                 list.c_str());
  }
  BackendOptions indexed = options;
  indexed.device_index = spec.index;
  return factory->create(id, indexed);
}

std::string DeviceKindName(std::string_view backend) {
  // Device APIs are proper names ("Vulkan") or acronyms ("CUDA").
  if (backend == "cuda") return "CUDA";
  std::string name(backend);
  if (!name.empty()) name[0] = char(std::toupper(static_cast<unsigned char>(name[0])));
  return name;
}

}  // namespace petrel
