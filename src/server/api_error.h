// The errors the server answers with: an HTTP status and OpenAI's error object
// {"error": {"message", "type", "param", "code"}}.
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

// {"error": {...}} with null for an empty param or code, as OpenAI sends.
std::string ErrorJson(const ApiError& error);

}  // namespace petrel::server
