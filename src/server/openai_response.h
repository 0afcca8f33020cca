// The JSON a client reads back: streamed chunks (Server-Sent Events) and whole responses of
// chat.completion / text_completion, with logprobs and usage in OpenAI's shapes.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.h"
#include "server/job.h"
#include "server/reply_parser.h"
#include "server/response_format.h"

namespace petrel::server {

class OpenAiResponse final : public ResponseFormat {
 public:
  OpenAiResponse(const CompletionRequest& request, const Tokenizer& tokenizer,
                 std::string model_name);

  // Streaming: the "data: {...}\n\n" event of a delta or choice end ("" for none), the usage
  // chunk (stream_options.include_usage), an error event, and the end.
  std::string StreamEvent(const JobEvent& event) override;
  std::string StreamUsage(const Usage& usage) const;
  static std::string StreamError(const ApiError& error);
  static constexpr const char* kStreamDone = "data: [DONE]\n\n";
  // The usage chunk when asked for (stream_options.include_usage), then [DONE].
  std::string StreamEnd(const Usage& usage) override;
  std::string StreamFailure(const ApiError& error) override;
  // An SSE comment line, which OpenAI's clients skip.
  std::string Heartbeat() const override { return ": keep-alive\n\n"; }

  // Whole response: every event added, then the body.
  void Add(const JobEvent& event) override;
  std::string Body(const Usage& usage) const override;
  ErrorShape error_shape() const override { return ErrorShape::kOpenAi; }

 private:
  struct ChoiceText {
    std::string text;
    std::vector<GeneratedToken> tokens;
    std::string finish_reason;
    bool started = false;  // streaming: the role was sent
    std::unique_ptr<ReplyStream> reply;  // streaming chat with tool calls or reasoning
  };
  bool ParsesReply() const;
  // Streaming: the chunks of a choice's text read through its ReplyStream.
  std::string ReplyChunks(ChoiceText& choice, size_t index, const ReplyParts& parts,
                          const std::vector<GeneratedToken>& tokens);
  std::string Chunk(size_t index, nlohmann::json delta, const nlohmann::json& logprobs,
                    const nlohmann::json& finish_reason) const;
  nlohmann::json Envelope(const char* object) const;
  nlohmann::json LogprobsJson(const std::vector<GeneratedToken>& tokens, size_t text_offset) const;
  static nlohmann::json UsageJson(const Usage& usage);
  static std::string Data(const nlohmann::json& value);

  const CompletionRequest& request_;
  const Tokenizer& tokenizer_;
  const std::string model_;
  const std::string id_;
  const long long created_;
  std::vector<ChoiceText> choices_;
};

}  // namespace petrel::server
