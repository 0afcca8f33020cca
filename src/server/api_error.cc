// ApiError: the OpenAI error object and the error type of each status.
#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace petrel::server {
namespace {

// OpenAI's `type` for a status without a field of its own.
const char* ErrorType(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_exceeded";
    case 503:
      return "service_unavailable";
  }
  return status >= 500 ? "server_error" : "invalid_request_error";
}

// Anthropic's error types by status (its API documents these; 503 is its "overloaded").
const char* AnthropicErrorType(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
  }
  return status >= 500 ? "api_error" : "invalid_request_error";
}

}  // namespace

ErrorShape ErrorShapeOfPath(const std::string& path) {
  // Also the Messages API's other routes, which this server does not have: their 404 is then
  // one an Anthropic client reads.
  const std::string route = "/v1/messages";
  const bool messages = path.compare(0, route.size(), route) == 0 &&
                        (path.size() == route.size() || path[route.size()] == '/');
  return messages ? ErrorShape::kAnthropic : ErrorShape::kOpenAi;
}

ApiError InvalidField(const std::string& param, const std::string& message,
                      const std::string& code) {
  return ApiError{400, message, "invalid_request_error", param, code};
}

ApiError StatusError(int status, const std::string& message) {
  return ApiError{status, message, ErrorType(status), "", ""};
}

std::string ErrorJson(const ApiError& error, ErrorShape shape) {
  if (shape == ErrorShape::kAnthropic) {
    const nlohmann::json body = {
        {"type", "error"},
        {"error", {{"type", AnthropicErrorType(error.status)}, {"message", error.message}}}};
    return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  nlohmann::json body = {
      {"error",
       {{"message", error.message},
        {"type", error.type},
        {"param", error.param.empty() ? nlohmann::json() : nlohmann::json(error.param)},
        {"code", error.code.empty() ? nlohmann::json() : nlohmann::json(error.code)}}}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace petrel::server
