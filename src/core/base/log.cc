// Log(): one line per call on stderr, filtered by the global level.
#include "core/base/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace petrel {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kWarning};
const char* Prefix(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug: ";
    case LogLevel::kInfo: return "";
    case LogLevel::kWarning: return "warning: ";
    case LogLevel::kError: return "error: ";
    case LogLevel::kSilent: return "";
  }
  return "";
}
}  // namespace

void SetLogLevel(LogLevel level) { g_level = level; }
LogLevel GetLogLevel() { return g_level; }

void Log(LogLevel level, const char* format, ...) {
  if (level < g_level.load()) return;
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  std::fprintf(stderr, "%s%s\n", Prefix(level), buffer);
}

}  // namespace petrel
