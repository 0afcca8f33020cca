// What a chat request reads back from its reply (tool calls in which format, a think block), and
// for tool_choice "required" or a named function the grammar that forces the call.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/completion_request.h"

namespace petrel::server {

// `template_source`: the chat template's text; `forced_format`: --tool-call-format (null: the
// template's); `server_reasoning_format`: --reasoning-format; `prompt_tail`: the end of the
// rendered prompt. Sets request->reply (and the grammar); a 400 names the field at fault.
ApiResult SetUpReplyParsing(std::string_view template_source,
                            std::optional<ToolCallFormat> forced_format,
                            const std::string& server_reasoning_format,
                            std::string_view prompt_tail, CompletionRequest* request);

}  // namespace petrel::server
