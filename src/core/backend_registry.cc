// The only file that names the backends.
#include "core/backend_registry.h"

#include "cpu/cpu_backend.h"
#include "ref/ref_backend.h"

namespace petrel {

std::vector<std::string> AvailableBackends() { return {"cpu", "ref"}; }

Result<std::unique_ptr<Backend>> CreateBackend(std::string_view name, BackendId id,
                                               const BackendOptions& options) {
  if (name == "cpu") return CreateCpuBackend(id, options.n_threads, options.pin_threads);
  if (name == "ref") return CreateRefBackend(id);
  std::string known;
  for (const std::string& backend : AvailableBackends())
    known += (known.empty() ? "" : ", ") + backend;
  return Error("unknown device '%.*s' (this build has: %s)", int(name.size()), name.data(),
               known.c_str());
}

}  // namespace petrel
