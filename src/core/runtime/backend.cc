// The default cross-backend copy: through host memory.
#include "core/runtime/backend.h"

namespace petrel {

Status Backend::CopyToBackend(const BackendBuffer& src, size_t src_offset, Backend& dst_backend,
                              BackendBuffer& dst, size_t dst_offset, size_t bytes) {
  if (staging_.size() < bytes) staging_.resize(bytes);
  PETREL_RETURN_IF_ERROR(CopyToHost(src, src_offset, staging_.data(), bytes));
  PETREL_RETURN_IF_ERROR(Synchronize());
  PETREL_RETURN_IF_ERROR(dst_backend.CopyFromHost(staging_.data(), dst, dst_offset, bytes));
  // The staging bytes must outlive an asynchronous upload.
  return dst_backend.Synchronize();
}

}  // namespace petrel
