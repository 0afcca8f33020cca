// The errors the server answers with: an HTTP status and an error object in the shape of the
// API asked: OpenAI's {"error": {"message", "type", "param", "code"}} or Anthropic's
// {"type": "error", "error": {"type", "message"}}.
#pragma once

#include <string>

namespace petrel::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending request field, "" when none
  std::string code;   // a machine-readable reason, "" when none
};

// 400 naming `param`: a missing, mistyped, out-of-range or unsupported field.
ApiError InvalidField(const std::string& param, const std::string& message,
                      const std::string& code = "invalid_value");
// The error object of `status` for errors without a field (401, 404, 413, 429, 500, 503).
ApiError StatusError(int status, const std::string& message);

// Which API's error object a route answers with.
enum class ErrorShape { kOpenAi, kAnthropic };
// /v1/messages (and paths under it) answers in Anthropic's shape, every other route in OpenAI's.
ErrorShape ErrorShapeOfPath(const std::string& path);

// OpenAI: {"error": {...}} with null for an empty param or code. Anthropic: {"type": "error",
// "error": {"type", "message"}} with Anthropic's type for the status (the field, when there is
// one, is named in the message already).
std::string ErrorJson(const ApiError& error, ErrorShape shape = ErrorShape::kOpenAi);

}  // namespace petrel::server
