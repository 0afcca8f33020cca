// `tool_choice` and `parallel_tool_calls`: which calls a request allows, and for "required" or a
// named function the grammar that makes the model write such a call in the template's format,
// its arguments following the tool's `parameters` schema (so they always parse).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/base/status.h"
#include "server/api_error.h"
#include "server/json_fields.h"  // ApiResult
#include "server/tool_calls.h"

namespace petrel::server {

struct ToolChoice {
  enum class Mode { kNone, kAuto, kRequired, kNamed };
  Mode mode = Mode::kAuto;
  std::string name;  // kNamed: the function
};

// Checks `tools` (each {"type": "function", "function": {"name", "parameters"?}}) and
// `tool_choice` ("none", "auto", "required", {"type": "function", "function": {"name"}} naming
// one of the tools); a 400 names the field. No tools: "auto" and "none" only.
ApiResult ReadToolChoice(const nlohmann::ordered_json& tools,
                         const nlohmann::ordered_json& tool_choice, ToolChoice* out);

// GBNF for a reply that is only tool calls (one, or with `parallel` one or more) of `choice`'s
// functions, in `format` (harmony: always one, as its call ends the turn). Errors name the schema
// that cannot be enforced.
Result<std::string> ToolCallGrammar(ToolCallFormat format, const nlohmann::ordered_json& tools,
                                    const ToolChoice& choice, bool parallel);

}  // namespace petrel::server
