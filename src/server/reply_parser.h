// A chat reply read back into OpenAI's message parts: the reasoning (think block), the content,
// and the tool calls, whole or as streamed deltas. Which parts are looked for is the request's
// ReplyParsing, decided from the model's chat template and the request.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning.h"
#include "server/tool_calls.h"

namespace petrel::server {

struct ReplyParsing {
  bool tool_calls = false;  // the request has tools and tool_choice is not "none"
  ToolCallFormat format = ToolCallFormat::kGeneric;
  bool single_call = false;          // parallel_tool_calls false: the first call only
  bool reasoning = false;            // split a think block into reasoning_content
  bool starts_in_reasoning = false;  // the prompt opened the think block
  // A harmony template (gpt-oss): the reply is always read as harmony messages, with or
  // without tools; `reasoning` false puts the analysis channel in the content.
  bool harmony = false;
};

struct ReplyParts {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;  // ids filled in
  size_t first_call_index = 0;
};

// The whole reply.
ReplyParts ParseReply(const ReplyParsing& parsing, std::string_view text);

class ReplyStream {
 public:
  explicit ReplyStream(const ReplyParsing& parsing);
  ReplyParts Push(std::string_view text);
  ReplyParts Finish();
  size_t calls_sent() const { return calls_sent_; }

 private:
  ReplyParts FromReasoning(const ReasoningSplit& split, bool final);
  ReplyParts FromToolStream(std::string_view text, bool final);
  ReplyParsing parsing_;
  std::optional<ReasoningStream> reasoning_;
  std::optional<ToolCallStream> tools_;
  size_t calls_sent_ = 0;
};

// OpenAI's message.tool_calls entry, and the two stream deltas of a call: the first with its
// id, type and name (arguments ""), then its arguments.
nlohmann::json ToolCallJson(const ToolCall& call);
nlohmann::json ToolCallHeadDelta(const ToolCall& call, size_t index);
nlohmann::json ToolCallArgumentsDelta(const ToolCall& call, size_t index);

}  // namespace petrel::server
