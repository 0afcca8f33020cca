// The JSON a /v1/messages client reads back, in Anthropic's shapes: the whole `message` object,
// or its stream of Server-Sent Events (message_start, ping, content_block_start / _delta / _stop
// per block, message_delta with the stop reason and usage, message_stop; `error` on failure).
// The reply is read through the same ReplyParsing as the chat endpoint: tool calls become
// tool_use blocks, a think block a thinking block.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/reply_parser.h"
#include "server/response_format.h"

namespace petrel::server {

class AnthropicResponse final : public ResponseFormat {
 public:
  // `prompt_tokens`: usage.input_tokens, which message_start reports before any generation.
  AnthropicResponse(const CompletionRequest& request, std::string model_name, size_t prompt_tokens);

  std::string StreamStart() override;  // message_start, then a ping
  std::string StreamEvent(const JobEvent& event) override;
  std::string StreamEnd(const Usage& usage) override;
  std::string StreamFailure(const ApiError& error) override;
  std::string Heartbeat() const override;

  void Add(const JobEvent& event) override;
  std::string Body(const Usage& usage) const override;
  ErrorShape error_shape() const override { return ErrorShape::kAnthropic; }

 private:
  enum class Block { kNone, kText, kThinking };
  static std::string Event(const char* type, const nlohmann::ordered_json& data);
  // Streaming: the events for what the reply parser found new, opening and closing blocks.
  std::string BlockEvents(const ReplyParts& parts);
  std::string OpenBlock(Block block);
  std::string CloseBlock();
  // end_turn, max_tokens, stop_sequence or tool_use.
  std::string StopReason(bool called) const;
  nlohmann::ordered_json UsageJson(size_t output_tokens) const;

  const CompletionRequest& request_;
  const std::string model_;
  const std::string id_;
  const size_t prompt_tokens_;
  std::string text_;  // the whole reply so far
  std::string finish_reason_;
  std::string stop_sequence_;
  ReplyStream reply_;
  Block open_ = Block::kNone;
  size_t next_index_ = 0;  // the index of the next content block
  size_t calls_ = 0;       // tool_use blocks sent
};

}  // namespace petrel::server
