// OpenAI's harmony format (gpt-oss): a reply is a run of messages, each a header and a body,
//   <|channel|>analysis<|message|>…thinking…<|end|>
//   <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>
//   {"city": "Paris"}<|call|>
//   <|start|>assistant<|channel|>final<|message|>…answer…<|return|>
// The prompt ends with "<|start|>assistant", so the reply's first header has no <|start|>.
// The analysis channel is reasoning; a message to `functions.NAME` is a call of NAME with the
// body as its arguments; final, commentary without a recipient (preambles) and text outside any
// message are content. Messages another role writes (a tool's output the model imagined) and
// recipients other than functions (builtin tools this server does not run) are dropped. The
// call and return markers are end-of-generation tokens the text may lack: a body still open at
// the reply's end ends there.
#pragma once

#include <string_view>

#include "server/tool_calls.h"

namespace petrel::server {

// As ParseToolCalls: `text` is the whole reply when `final`, else the reply so far, and then
// every part holds only what later bytes cannot change. Parts of one kind from several messages
// are joined by a newline.
ParsedToolCalls ParseHarmony(std::string_view text, bool final, const HarmonyOptions& options);

// Whether a chat template writes harmony messages.
bool TemplateUsesHarmony(std::string_view chat_template);

}  // namespace petrel::server
