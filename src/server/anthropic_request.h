// A /v1/messages request (Anthropic's Messages API) read into the CompletionRequest the chat
// endpoint runs: `system` and the content blocks become the chat template's messages (text,
// tool_use as an assistant's tool_calls, tool_result as tool messages), `tools` and
// `tool_choice` their OpenAI forms, the sampler fields the table every endpoint shares. Any
// other field is refused, never ignored.
#pragma once

#include <string>

#include "server/completion_request.h"

namespace petrel::server {

// Parses and checks `body`; a 400 names the first bad field. `max_tokens` is required, as
// Anthropic's API has it.
ApiResult ParseMessagesRequest(const std::string& body, const RequestLimits& limits,
                               CompletionRequest* out);

// Anthropic's tool_use id for a call id of ours ("call_…" becomes "toolu_…").
std::string ToolUseId(const std::string& call_id);

}  // namespace petrel::server
