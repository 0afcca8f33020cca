// Backend lookup by name over the compiled-in list.
#include "core/runtime/backend_registry.h"

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

Result<std::unique_ptr<Backend>> CreateBackend(std::string_view name, BackendId id,
                                               const BackendOptions& options) {
  for (const BackendFactory& factory : AllBackends()) {
    if (name == factory.name) return factory.create(id, options);
  }
  std::string known;
  for (const std::string& backend : AvailableBackends())
    known += (known.empty() ? "" : ", ") + backend;
  return Error("unknown device '%.*s' (this build has: %s)", int(name.size()), name.data(),
               known.c_str());
}

}  // namespace petrel
