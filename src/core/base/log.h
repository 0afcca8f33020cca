// Logging to stderr with a global level; results go to stdout, never here.
#pragma once

namespace petrel {

enum class LogLevel { kDebug, kInfo, kWarning, kError, kSilent };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void Log(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace petrel

#define PETREL_LOG_INFO(...) ::petrel::Log(::petrel::LogLevel::kInfo, __VA_ARGS__)
#define PETREL_LOG_WARN(...) ::petrel::Log(::petrel::LogLevel::kWarning, __VA_ARGS__)
#define PETREL_LOG_DEBUG(...) ::petrel::Log(::petrel::LogLevel::kDebug, __VA_ARGS__)
