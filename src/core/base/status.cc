// Formatting for Error().
#include "core/base/status.h"

#include <cstdarg>
#include <vector>

namespace petrel {

Status Error(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int length = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string message(length > 0 ? size_t(length) : 0, '\0');
  if (length > 0) std::vsnprintf(message.data(), message.size() + 1, format, args);
  va_end(args);
  return ErrorMessage(std::move(message));
}

}  // namespace petrel
