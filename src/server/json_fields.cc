// FieldReader: type and range checks with messages that name the field.
#include "server/json_fields.h"

#include <cmath>
#include <cstdio>

namespace petrel::server {
namespace {

std::string Format(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.10g", value);
  return text;
}

}  // namespace

const char* JsonTypeName(const nlohmann::ordered_json& value) {
  switch (value.type()) {
    case nlohmann::ordered_json::value_t::null:
      return "null";
    case nlohmann::ordered_json::value_t::object:
      return "an object";
    case nlohmann::ordered_json::value_t::array:
      return "an array";
    case nlohmann::ordered_json::value_t::string:
      return "a string";
    case nlohmann::ordered_json::value_t::boolean:
      return "a boolean";
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return "an integer";
    case nlohmann::ordered_json::value_t::number_float:
      return "a number";
    case nlohmann::ordered_json::value_t::binary:
      return "binary data";
    case nlohmann::ordered_json::value_t::discarded:
      return "invalid";
  }
  return "invalid";
}

const nlohmann::ordered_json* FieldReader::Find(const char* name) const {
  auto it = object_.find(name);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

ApiResult FieldReader::Integer(const char* name, int64_t lo, int64_t hi, int64_t* out) const {
  const nlohmann::ordered_json* value = Find(name);
  if (!value) return std::nullopt;
  // 3.0 is accepted as 3, as JavaScript clients send whole numbers as floats.
  bool whole = value->is_number_integer();
  if (value->is_number_float()) {
    const double number = value->get<double>();
    whole = std::isfinite(number) && number == std::floor(number) && std::fabs(number) < 9e15;
  }
  if (!whole) {
    return InvalidField(
        name, std::string("'") + name + "' must be an integer, not " + JsonTypeName(*value),
        "invalid_type");
  }
  const bool too_big = value->is_number_unsigned() && value->get<uint64_t>() > uint64_t(INT64_MAX);
  const int64_t number = too_big                    ? INT64_MAX
                         : value->is_number_float() ? int64_t(value->get<double>())
                                                    : value->get<int64_t>();
  if (too_big || number < lo || number > hi) {
    return InvalidField(name, std::string("'") + name + "' is " + value->dump() +
                                  ", outside the range [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + "]");
  }
  *out = number;
  return std::nullopt;
}

ApiResult FieldReader::Number(const char* name, double lo, double hi, double* out) const {
  const nlohmann::ordered_json* value = Find(name);
  if (!value) return std::nullopt;
  if (!value->is_number()) {
    return InvalidField(name,
                        std::string("'") + name + "' must be a number, not " + JsonTypeName(*value),
                        "invalid_type");
  }
  const double number = value->get<double>();
  if (!(number >= lo && number <= hi)) {
    return InvalidField(name, std::string("'") + name + "' is " + Format(number) +
                                  ", outside the range [" + Format(lo) + ", " + Format(hi) + "]");
  }
  *out = number;
  return std::nullopt;
}

ApiResult FieldReader::Boolean(const char* name, bool* out) const {
  const nlohmann::ordered_json* value = Find(name);
  if (!value) return std::nullopt;
  if (!value->is_boolean()) {
    return InvalidField(
        name, std::string("'") + name + "' must be a boolean, not " + JsonTypeName(*value),
        "invalid_type");
  }
  *out = value->get<bool>();
  return std::nullopt;
}

ApiResult FieldReader::String(const char* name, size_t max_bytes, std::string* out) const {
  const nlohmann::ordered_json* value = Find(name);
  if (!value) return std::nullopt;
  if (!value->is_string()) {
    return InvalidField(name,
                        std::string("'") + name + "' must be a string, not " + JsonTypeName(*value),
                        "invalid_type");
  }
  const std::string& text = value->get_ref<const std::string&>();
  if (text.size() > max_bytes) {
    return InvalidField(
        name, std::string("'") + name + "' is longer than " + std::to_string(max_bytes) + " bytes");
  }
  *out = text;
  return std::nullopt;
}

ApiResult CheckJsonDepth(std::string_view body) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) {
        return ApiError{
            400,
            "the request body is nested deeper than " + std::to_string(kMaxJsonDepth) + " levels",
            "invalid_request_error", "", "invalid_json"};
      }
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

}  // namespace petrel::server
