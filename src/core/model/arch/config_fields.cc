#include "core/model/arch/config_fields.h"

namespace petrel {

Result<int64_t> JsonInt(const nlohmann::json& json, const char* field) {
  auto it = json.find(field);
  if (it == json.end()) return Error("config.json: field '%s' is missing", field);
  if (!it->is_number_integer()) return Error("config.json: field '%s' must be an integer", field);
  return it->get<int64_t>();
}

Result<int64_t> JsonIntOr(const nlohmann::json& json, const char* field, int64_t fallback) {
  auto it = json.find(field);
  if (it == json.end() || it->is_null()) return fallback;
  return JsonInt(json, field);
}

Result<double> JsonNumberOr(const nlohmann::json& json, const char* field, double fallback) {
  auto it = json.find(field);
  if (it == json.end() || it->is_null()) return fallback;
  if (!it->is_number()) return Error("config.json: field '%s' must be a number", field);
  return it->get<double>();
}

Result<bool> JsonBoolOr(const nlohmann::json& json, const char* field, bool fallback) {
  auto it = json.find(field);
  if (it == json.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Error("config.json: field '%s' must be true or false", field);
  return it->get<bool>();
}

Result<std::string> JsonStringOr(const nlohmann::json& json, const char* field,
                                 const char* fallback) {
  auto it = json.find(field);
  if (it == json.end() || it->is_null()) return std::string(fallback);
  if (!it->is_string()) return Error("config.json: field '%s' must be a string", field);
  return it->get<std::string>();
}

}  // namespace petrel
