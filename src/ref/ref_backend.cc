// CreateRefBackend: a single-threaded HostBackend over the scalar reference kernels.
#include "ref/ref_backend.h"

#include "cpu/host_backend.h"
#include "ref/reference_kernels.h"

namespace petrel {

Result<std::unique_ptr<Backend>> CreateRefBackend(BackendId id) {
  return std::unique_ptr<Backend>(std::make_unique<HostBackend>(
      "ref", id, ref::ReferenceKernels(), &ref::SupportsWeightType, /*n_threads=*/1));
}

}  // namespace petrel
