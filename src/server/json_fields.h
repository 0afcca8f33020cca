// Typed, bounded reads of request fields: each failure is a 400 naming the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace petrel::server {

using ApiResult = std::optional<ApiError>;  // nullopt: fine

#define PETREL_RETURN_IF_API_ERROR(expr)                                                  \
  do {                                                                                    \
    if (::petrel::server::ApiResult petrel_api_error_ = (expr)) return petrel_api_error_; \
  } while (0)

// A field absent or null leaves `*out` as it was; a field of the wrong type or outside [lo, hi]
// is an error naming it, its value and the range.
class FieldReader {
 public:
  explicit FieldReader(const nlohmann::ordered_json& object) : object_(object) {}
  // The field's value, or null when absent or JSON null.
  const nlohmann::ordered_json* Find(const char* name) const;
  ApiResult Integer(const char* name, int64_t lo, int64_t hi, int64_t* out) const;
  ApiResult Number(const char* name, double lo, double hi, double* out) const;
  ApiResult Boolean(const char* name, bool* out) const;
  ApiResult String(const char* name, size_t max_bytes, std::string* out) const;

 private:
  const nlohmann::ordered_json& object_;
};

// Request bodies nested deeper than this are refused before parsing: nlohmann's ordered objects
// copy a member's whole subtree each time they grow, so parsing a deep body with keys after a
// large member costs depth times its size (a few hundred kilobytes 5,000 levels deep took
// seconds).
constexpr size_t kMaxJsonDepth = 100;
// A 400 when `body` nests arrays and objects deeper than kMaxJsonDepth (a byte scan that skips
// strings; it does not validate the JSON).
ApiResult CheckJsonDepth(std::string_view body);

// The JSON type of `value` in words ("a string", "an array", ...), for messages.
const char* JsonTypeName(const nlohmann::ordered_json& value);

}  // namespace petrel::server
