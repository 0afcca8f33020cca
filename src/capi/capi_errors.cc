// The thread-local last error, status names, and reading params structs by their size.
#include "capi/capi_errors.h"

#include <cstdarg>
#include <cstdio>

namespace petrel::capi {
namespace {
thread_local std::string t_last_error;
}  // namespace

petrel_status Fail(petrel_status code, const std::string& message) {
  t_last_error = message;
  return code;
}

petrel_status FailF(petrel_status code, const char* format, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  return Fail(code, buffer);
}

petrel_status ReadSizedParams(const void* given, const void* defaults, size_t known_size,
                              const char* what, void* out) {
  std::memcpy(out, defaults, known_size);
  if (!given) return PETREL_OK;
  size_t given_size;
  std::memcpy(&given_size, given, sizeof(given_size));
  if (given_size < sizeof(size_t)) {
    return FailF(PETREL_ERR_INVALID_ARGUMENT,
                 "%s: struct_size is %zu; start from %s_default_params(), which sets it", what,
                 given_size, what);
  }
  if (given_size > (size_t(1) << 16)) {
    return FailF(PETREL_ERR_INVALID_ARGUMENT,
                 "%s: struct_size %zu is not the size of a params struct", what, given_size);
  }
  const auto* bytes = static_cast<const unsigned char*>(given);
  for (size_t i = known_size; i < given_size; ++i) {
    if (bytes[i] != 0) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT,
                   "%s: a field at byte %zu is set, but this library (%s) knows only the first %zu "
                   "bytes of the struct",
                   what, i, petrel_version(), known_size);
    }
  }
  std::memcpy(out, given, given_size < known_size ? given_size : known_size);
  // The struct as this library knows it.
  std::memcpy(out, &known_size, sizeof(size_t));
  return PETREL_OK;
}

}  // namespace petrel::capi

extern "C" {

const char* petrel_last_error(void) { return petrel::capi::t_last_error.c_str(); }

const char* petrel_status_name(petrel_status status) {
  switch (petrel::capi::EnumBits(status)) {
    case PETREL_OK:
      return "PETREL_OK";
    case PETREL_ERR_INVALID_ARGUMENT:
      return "PETREL_ERR_INVALID_ARGUMENT";
    case PETREL_ERR_IO:
      return "PETREL_ERR_IO";
    case PETREL_ERR_FORMAT:
      return "PETREL_ERR_FORMAT";
    case PETREL_ERR_BUFFER_TOO_SMALL:
      return "PETREL_ERR_BUFFER_TOO_SMALL";
    case PETREL_ERR_CANCELLED:
      return "PETREL_ERR_CANCELLED";
    case PETREL_ERR_STATE:
      return "PETREL_ERR_STATE";
    case PETREL_ERR_OUT_OF_MEMORY:
      return "PETREL_ERR_OUT_OF_MEMORY";
    case PETREL_ERR_BACKEND:
      return "PETREL_ERR_BACKEND";
    case PETREL_ERR_INTERNAL:
      return "PETREL_ERR_INTERNAL";
  }
  return "unknown status";
}

}  // extern "C"
