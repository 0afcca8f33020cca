// Backend lookup by name over the compiled-in list.
#include "core/runtime/backend_registry.h"

namespace petrel {

std::vector<std::string> AvailableBackends() {
  std::vector<std::string> names;
  for (const BackendFactory& factory : CompiledBackends()) names.emplace_back(factory.name);
  return names;
}

Result<std::unique_ptr<Backend>> CreateBackend(std::string_view name, BackendId id,
                                               const BackendOptions& options) {
  for (const BackendFactory& factory : CompiledBackends()) {
    if (name == factory.name) return factory.create(id, options);
  }
  std::string known;
  for (const std::string& backend : AvailableBackends())
    known += (known.empty() ? "" : ", ") + backend;
  return Error("unknown device '%.*s' (this build has: %s)", int(name.size()), name.data(),
               known.c_str());
}

}  // namespace petrel
