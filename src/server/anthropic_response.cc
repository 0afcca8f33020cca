// AnthropicResponse: message bodies and stream events of the Messages API.
#include "server/anthropic_response.h"

#include <cstdio>
#include <random>

#include "server/anthropic_request.h"  // ToolUseId

namespace petrel::server {
namespace {

using json = nlohmann::ordered_json;

std::string NewMessageId() {
  std::random_device random;
  char hex[25];
  std::snprintf(hex, sizeof(hex), "%08x%08x%08x", random(), random(), random());
  return std::string("msg_") + hex;
}

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

json ToolUseBlock(const ToolCall& call, bool with_input) {
  json input = json::parse(call.arguments, nullptr, false);
  if (!input.is_object()) input = json::object();
  return json{{"type", "tool_use"},
              {"id", ToolUseId(call.id)},
              {"name", call.name},
              {"input", with_input ? input : json::object()}};
}

}  // namespace

AnthropicResponse::AnthropicResponse(const CompletionRequest& request, std::string model_name,
                                     size_t prompt_tokens)
    : request_(request),
      model_(std::move(model_name)),
      id_(NewMessageId()),
      prompt_tokens_(prompt_tokens),
      reply_(request.reply) {}

std::string AnthropicResponse::Event(const char* type, const json& data) {
  return std::string("event: ") + type + "\ndata: " + Dump(data) + "\n\n";
}

json AnthropicResponse::UsageJson(size_t output_tokens) const {
  return json{{"input_tokens", prompt_tokens_}, {"output_tokens", output_tokens}};
}

std::string AnthropicResponse::StopReason(bool called) const {
  if (finish_reason_ == "length") return "max_tokens";
  if (!stop_sequence_.empty()) return "stop_sequence";
  return called ? "tool_use" : "end_turn";
}

std::string AnthropicResponse::StreamStart() {
  const json message = {{"id", id_},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", model_},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage", UsageJson(0)}};
  return Event("message_start", {{"type", "message_start"}, {"message", message}}) + Heartbeat();
}

std::string AnthropicResponse::Heartbeat() const { return Event("ping", {{"type", "ping"}}); }

std::string AnthropicResponse::OpenBlock(Block block) {
  if (open_ == block) return "";
  std::string out = CloseBlock();
  open_ = block;
  const json content = block == Block::kText
                           ? json{{"type", "text"}, {"text", ""}}
                           : json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
  return out + Event("content_block_start", {{"type", "content_block_start"},
                                             {"index", next_index_},
                                             {"content_block", content}});
}

std::string AnthropicResponse::CloseBlock() {
  if (open_ == Block::kNone) return "";
  open_ = Block::kNone;
  return Event("content_block_stop", {{"type", "content_block_stop"}, {"index", next_index_++}});
}

std::string AnthropicResponse::BlockEvents(const ReplyParts& parts) {
  std::string out;
  auto delta = [&](const json& body) {
    out += Event("content_block_delta",
                 {{"type", "content_block_delta"}, {"index", next_index_}, {"delta", body}});
  };
  if (!parts.reasoning.empty()) {
    out += OpenBlock(Block::kThinking);
    delta({{"type", "thinking_delta"}, {"thinking", parts.reasoning}});
  }
  if (!parts.content.empty()) {
    out += OpenBlock(Block::kText);
    delta({{"type", "text_delta"}, {"text", parts.content}});
  }
  // Each call is one block: its start (input {}), its whole input as one input_json_delta, its
  // stop.
  for (const ToolCall& call : parts.calls) {
    out += CloseBlock();
    out += Event("content_block_start", {{"type", "content_block_start"},
                                         {"index", next_index_},
                                         {"content_block", ToolUseBlock(call, false)}});
    json input = json::parse(call.arguments, nullptr, false);
    delta({{"type", "input_json_delta"},
           {"partial_json", input.is_object() ? Dump(input) : std::string("{}")}});
    out += Event("content_block_stop", {{"type", "content_block_stop"}, {"index", next_index_++}});
    ++calls_;
  }
  return out;
}

std::string AnthropicResponse::StreamEvent(const JobEvent& event) {
  if (event.kind == JobEvent::Kind::kDelta) {
    text_ += event.text;
    return BlockEvents(reply_.Push(event.text));
  }
  if (event.kind == JobEvent::Kind::kChoiceEnd) {
    finish_reason_ = event.finish_reason;
    stop_sequence_ = event.stop_sequence;
    return BlockEvents(reply_.Finish()) + CloseBlock();
  }
  return "";
}

std::string AnthropicResponse::StreamEnd(const Usage& usage) {
  std::string out = CloseBlock();
  out += Event("message_delta",
               {{"type", "message_delta"},
                {"delta",
                 {{"stop_reason", StopReason(calls_ > 0)},
                  {"stop_sequence", stop_sequence_.empty() ? json() : json(stop_sequence_)}}},
                {"usage", UsageJson(usage.completion_tokens)}});
  return out + Event("message_stop", {{"type", "message_stop"}});
}

std::string AnthropicResponse::StreamFailure(const ApiError& error) {
  return Event("error", json::parse(ErrorJson(error, ErrorShape::kAnthropic)));
}

void AnthropicResponse::Add(const JobEvent& event) {
  if (event.kind == JobEvent::Kind::kDelta) text_ += event.text;
  if (event.kind == JobEvent::Kind::kChoiceEnd) {
    finish_reason_ = event.finish_reason;
    stop_sequence_ = event.stop_sequence;
  }
}

std::string AnthropicResponse::Body(const Usage& usage) const {
  const ReplyParts parts = ParseReply(request_.reply, text_);
  json content = json::array();
  if (!parts.reasoning.empty()) {
    content.push_back({{"type", "thinking"}, {"thinking", parts.reasoning}, {"signature", ""}});
  }
  if (!parts.content.empty()) content.push_back({{"type", "text"}, {"text", parts.content}});
  for (const ToolCall& call : parts.calls) content.push_back(ToolUseBlock(call, true));
  const json body = {{"id", id_},
                     {"type", "message"},
                     {"role", "assistant"},
                     {"model", model_},
                     {"content", content},
                     {"stop_reason", StopReason(!parts.calls.empty())},
                     {"stop_sequence", stop_sequence_.empty() ? json() : json(stop_sequence_)},
                     {"usage", UsageJson(usage.completion_tokens)}};
  return Dump(body);
}

}  // namespace petrel::server
