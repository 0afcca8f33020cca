// ReplyStream: the think-block splitter feeding the tool-call parser.
#include "server/reply_parser.h"

namespace petrel::server {
namespace {

void AssignIds(std::vector<ToolCall>* calls) {
  for (ToolCall& call : *calls) {
    // A model's own ids (Mistral's 9 characters) are kept: its template renders them back.
    if (call.id.empty()) call.id = NewToolCallId();
  }
}

HarmonyOptions HarmonyOptionsOf(const ReplyParsing& parsing) {
  HarmonyOptions options;
  options.calls = parsing.tool_calls;
  options.analysis_to_content = !parsing.reasoning;
  return options;
}

}  // namespace

ReplyParts ParseReply(const ReplyParsing& parsing, std::string_view text) {
  ReplyParts parts;
  if (parsing.harmony) {
    ParsedToolCalls parsed =
        ParseToolCalls(ToolCallFormat::kHarmony, text, /*final=*/true, HarmonyOptionsOf(parsing));
    parts.reasoning = std::move(parsed.reasoning);
    parts.content = std::move(parsed.content);
    parts.calls = std::move(parsed.calls);
    if (parsing.single_call && parts.calls.size() > 1) parts.calls.resize(1);
    AssignIds(&parts.calls);
    return parts;
  }
  std::string content(text);
  if (parsing.reasoning) {
    ReasoningSplit split = SplitReasoning(text, parsing.starts_in_reasoning, /*final=*/true);
    parts.reasoning = std::move(split.reasoning);
    content = std::move(split.content);
  }
  if (parsing.tool_calls) {
    ParsedToolCalls parsed = ParseToolCalls(parsing.format, content, /*final=*/true);
    parts.content = std::move(parsed.content);
    parts.calls = std::move(parsed.calls);
    if (parsing.single_call && parts.calls.size() > 1) parts.calls.resize(1);
    AssignIds(&parts.calls);
  } else {
    parts.content = std::move(content);
  }
  return parts;
}

ReplyStream::ReplyStream(const ReplyParsing& parsing) : parsing_(parsing) {
  if (parsing.harmony) {
    tools_.emplace(ToolCallFormat::kHarmony, HarmonyOptionsOf(parsing));
    return;
  }
  if (parsing.reasoning) reasoning_.emplace(parsing.starts_in_reasoning);
  if (parsing.tool_calls) tools_.emplace(parsing.format);
}

ReplyParts ReplyStream::FromReasoning(const ReasoningSplit& split, bool final) {
  if (!tools_) {
    ReplyParts parts;
    parts.reasoning = split.reasoning;
    parts.content = split.content;
    return parts;
  }
  ReplyParts parts = FromToolStream(split.content, final);
  parts.reasoning = split.reasoning + parts.reasoning;
  return parts;
}

// The tool-call stream's view (harmony's reasoning included).
ReplyParts ReplyStream::FromToolStream(std::string_view text, bool final) {
  ReplyParts parts;
  ToolCallStream::Delta delta = tools_->Push(text);
  if (final) {
    ToolCallStream::Delta last = tools_->Finish();
    delta.content += last.content;
    delta.reasoning += last.reasoning;
    delta.calls.insert(delta.calls.end(), last.calls.begin(), last.calls.end());
  }
  parts.reasoning = std::move(delta.reasoning);
  parts.content = std::move(delta.content);
  for (ToolCall& call : delta.calls) {
    if (parsing_.single_call && calls_sent_ >= 1) break;
    parts.calls.push_back(std::move(call));
    ++calls_sent_;
  }
  parts.first_call_index = calls_sent_ - parts.calls.size();
  AssignIds(&parts.calls);
  return parts;
}

ReplyParts ReplyStream::Push(std::string_view text) {
  if (parsing_.harmony) return FromToolStream(text, /*final=*/false);
  ReasoningSplit split =
      reasoning_ ? reasoning_->Push(text) : ReasoningSplit{"", std::string(text)};
  return FromReasoning(split, /*final=*/false);
}

ReplyParts ReplyStream::Finish() {
  if (parsing_.harmony) return FromToolStream("", /*final=*/true);
  ReasoningSplit split = reasoning_ ? reasoning_->Finish() : ReasoningSplit{};
  return FromReasoning(split, /*final=*/true);
}

nlohmann::json ToolCallJson(const ToolCall& call) {
  return {{"id", call.id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

nlohmann::json ToolCallHeadDelta(const ToolCall& call, size_t index) {
  return {{"index", index},
          {"id", call.id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", ""}}}};
}

nlohmann::json ToolCallArgumentsDelta(const ToolCall& call, size_t index) {
  return {{"index", index}, {"function", {{"arguments", call.arguments}}}};
}

}  // namespace petrel::server
