// Typed reads of config.json fields for the families' config readers: a missing or mistyped
// field is one error line naming it, never a default read as if it were the value.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/base/status.h"

namespace petrel {

// A required integer.
Result<int64_t> JsonInt(const nlohmann::json& json, const char* field);
// Fields that may be absent or null (then `fallback`), and otherwise must have their type.
Result<int64_t> JsonIntOr(const nlohmann::json& json, const char* field, int64_t fallback);
Result<double> JsonNumberOr(const nlohmann::json& json, const char* field, double fallback);
Result<bool> JsonBoolOr(const nlohmann::json& json, const char* field, bool fallback);
Result<std::string> JsonStringOr(const nlohmann::json& json, const char* field,
                                 const char* fallback);

}  // namespace petrel
