// OpenAiResponse: chunk and body JSON for both endpoints.
#include "server/openai_response.h"

#include <ctime>
#include <random>

namespace petrel::server {
namespace {

// Keys in sorted order (the other handlers use ordered_json).
using sorted_json = nlohmann::json;

std::string NewId(const char* prefix) {
  std::random_device random;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%08x%08x", random(), random());
  return std::string(prefix) + hex;
}

sorted_json Bytes(const std::string& text) {
  sorted_json bytes = sorted_json::array();
  for (unsigned char c : text) bytes.push_back(int(c));
  return bytes;
}

}  // namespace

OpenAiResponse::OpenAiResponse(const CompletionRequest& request, const Tokenizer& tokenizer,
                               std::string model_name)
    : request_(request),
      tokenizer_(tokenizer),
      model_(std::move(model_name)),
      id_(NewId(request.endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-")),
      created_(static_cast<long long>(std::time(nullptr))),
      choices_(request.n) {}

std::string OpenAiResponse::Data(const sorted_json& value) {
  return "data: " + value.dump(-1, ' ', false, sorted_json::error_handler_t::replace) + "\n\n";
}

sorted_json OpenAiResponse::Envelope(const char* object) const {
  return sorted_json{{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

sorted_json OpenAiResponse::UsageJson(const Usage& usage) {
  return sorted_json{
      {"prompt_tokens", usage.prompt_tokens},
      {"completion_tokens", usage.completion_tokens},
      {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
      {"prompt_tokens_details", sorted_json{{"cached_tokens", usage.cached_tokens}}}};
}

sorted_json OpenAiResponse::LogprobsJson(const std::vector<GeneratedToken>& tokens,
                                         size_t text_offset) const {
  auto text_of = [&](int32_t id) { return tokenizer_.Decode({id}, /*skip_special=*/false); };
  if (request_.endpoint == Endpoint::kChat) {
    sorted_json content = sorted_json::array();
    for (const GeneratedToken& token : tokens) {
      const std::string text = text_of(token.id);
      sorted_json top = sorted_json::array();
      for (size_t i = 0; i < token.top.size() && i < request_.top_logprobs; ++i) {
        const std::string alt = text_of(token.top[i].id);
        top.push_back({{"token", alt}, {"logprob", token.top[i].logprob}, {"bytes", Bytes(alt)}});
      }
      content.push_back({{"token", text},
                         {"logprob", token.logprob},
                         {"bytes", Bytes(text)},
                         {"top_logprobs", top}});
    }
    return sorted_json{{"content", content}};
  }
  // The legacy completions form: parallel arrays.
  sorted_json texts = sorted_json::array(), logprobs = sorted_json::array(),
              tops = sorted_json::array(), offsets = sorted_json::array();
  for (const GeneratedToken& token : tokens) {
    const std::string text = text_of(token.id);
    texts.push_back(text);
    logprobs.push_back(token.logprob);
    sorted_json top = sorted_json::object();
    for (size_t i = 0; i < token.top.size() && i < request_.top_logprobs; ++i) {
      top[text_of(token.top[i].id)] = token.top[i].logprob;
    }
    tops.push_back(top);
    offsets.push_back(text_offset);
    text_offset += text.size();
  }
  return sorted_json{{"tokens", texts},
                     {"token_logprobs", logprobs},
                     {"top_logprobs", tops},
                     {"text_offset", offsets}};
}

bool OpenAiResponse::ParsesReply() const {
  return request_.endpoint == Endpoint::kChat &&
         (request_.reply.tool_calls || request_.reply.reasoning);
}

std::string OpenAiResponse::Chunk(size_t index, sorted_json delta, const sorted_json& logprobs,
                                  const sorted_json& finish_reason) const {
  sorted_json chunk = Envelope("chat.completion.chunk");
  chunk["choices"] = sorted_json::array({sorted_json{{"index", index},
                                                     {"delta", std::move(delta)},
                                                     {"logprobs", logprobs},
                                                     {"finish_reason", finish_reason}}});
  if (request_.include_usage) chunk["usage"] = nullptr;
  return Data(chunk);
}

// One chunk for the reasoning and content, then per new call one with its id and name and one
// with its arguments (OpenAI's order); the tokens' logprobs go with the first.
std::string OpenAiResponse::ReplyChunks(ChoiceText& choice, size_t index, const ReplyParts& parts,
                                        const std::vector<GeneratedToken>& tokens) {
  std::string out;
  auto delta_start = [&]() {
    sorted_json delta = sorted_json::object();
    if (!choice.started) delta["role"] = "assistant";
    choice.started = true;
    return delta;
  };
  const bool with_logprobs = request_.logprobs && !tokens.empty();
  if (!parts.reasoning.empty() || !parts.content.empty() || with_logprobs) {
    sorted_json delta = delta_start();
    if (!parts.reasoning.empty()) delta["reasoning_content"] = parts.reasoning;
    if (!parts.content.empty() || parts.reasoning.empty()) delta["content"] = parts.content;
    out += Chunk(index, std::move(delta),
                 request_.logprobs ? LogprobsJson(tokens, choice.text.size()) : sorted_json(),
                 nullptr);
  }
  for (size_t i = 0; i < parts.calls.size(); ++i) {
    const size_t call_index = parts.first_call_index + i;
    sorted_json head = delta_start();
    head["content"] = nullptr;
    head["tool_calls"] = sorted_json::array({ToolCallHeadDelta(parts.calls[i], call_index)});
    out += Chunk(index, std::move(head), nullptr, nullptr);
    out += Chunk(
        index,
        sorted_json{{"tool_calls",
                     sorted_json::array({ToolCallArgumentsDelta(parts.calls[i], call_index)})}},
        nullptr, nullptr);
  }
  return out;
}

std::string OpenAiResponse::StreamEvent(const JobEvent& event) {
  const bool chat = request_.endpoint == Endpoint::kChat;
  ChoiceText& choice = choices_[event.choice];
  if (ParsesReply()) {
    if (!choice.reply) choice.reply = std::make_unique<ReplyStream>(request_.reply);
    if (event.kind == JobEvent::Kind::kDelta) {
      std::string out =
          ReplyChunks(choice, event.choice, choice.reply->Push(event.text), event.tokens);
      choice.text += event.text;
      return out;
    }
    if (event.kind == JobEvent::Kind::kChoiceEnd) {
      std::string out = ReplyChunks(choice, event.choice, choice.reply->Finish(), {});
      sorted_json delta = sorted_json::object();
      if (!choice.started) delta["role"] = "assistant";
      choice.started = true;
      const bool called = choice.reply->calls_sent() > 0 && event.finish_reason == "stop";
      out += Chunk(event.choice, std::move(delta), nullptr,
                   called ? "tool_calls" : event.finish_reason);
      return out;
    }
    return "";
  }
  sorted_json entry = {{"index", event.choice}};
  switch (event.kind) {
    case JobEvent::Kind::kDelta: {
      if (event.text.empty() && event.tokens.empty()) return "";
      if (chat) {
        sorted_json delta = {{"content", event.text}};
        if (!choice.started) delta = {{"role", "assistant"}, {"content", event.text}};
        entry["delta"] = delta;
      } else {
        entry["text"] = event.text;
      }
      entry["logprobs"] =
          request_.logprobs ? LogprobsJson(event.tokens, choice.text.size()) : sorted_json();
      entry["finish_reason"] = nullptr;
      choice.text += event.text;
      choice.started = true;
      break;
    }
    case JobEvent::Kind::kChoiceEnd:
      if (chat) {
        entry["delta"] =
            choice.started ? sorted_json::object() : sorted_json{{"role", "assistant"}};
      } else {
        entry["text"] = "";
      }
      entry["logprobs"] = nullptr;
      entry["finish_reason"] = event.finish_reason;
      choice.started = true;
      break;
    case JobEvent::Kind::kDone:
    case JobEvent::Kind::kError:
      return "";
  }
  sorted_json chunk = Envelope(chat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = sorted_json::array({entry});
  if (request_.include_usage) chunk["usage"] = nullptr;
  return Data(chunk);
}

std::string OpenAiResponse::StreamUsage(const Usage& usage) const {
  sorted_json chunk =
      Envelope(request_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = sorted_json::array();
  chunk["usage"] = UsageJson(usage);
  return Data(chunk);
}

std::string OpenAiResponse::StreamError(const ApiError& error) {
  sorted_json body = {{"error",
                       {{"message", error.message},
                        {"type", error.type},
                        {"param", error.param.empty() ? sorted_json() : sorted_json(error.param)},
                        {"code", error.code.empty() ? sorted_json() : sorted_json(error.code)}}}};
  return Data(body);
}

std::string OpenAiResponse::StreamEnd(const Usage& usage) {
  return (request_.include_usage ? StreamUsage(usage) : std::string()) + kStreamDone;
}

std::string OpenAiResponse::StreamFailure(const ApiError& error) {
  return StreamError(error) + kStreamDone;
}

void OpenAiResponse::Add(const JobEvent& event) {
  ChoiceText& choice = choices_[event.choice];
  switch (event.kind) {
    case JobEvent::Kind::kDelta:
      choice.text += event.text;
      choice.tokens.insert(choice.tokens.end(), event.tokens.begin(), event.tokens.end());
      break;
    case JobEvent::Kind::kChoiceEnd:
      choice.finish_reason = event.finish_reason;
      break;
    case JobEvent::Kind::kDone:
    case JobEvent::Kind::kError:
      break;
  }
}

std::string OpenAiResponse::Body(const Usage& usage) const {
  const bool chat = request_.endpoint == Endpoint::kChat;
  sorted_json body = Envelope(chat ? "chat.completion" : "text_completion");
  sorted_json choices = sorted_json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const ChoiceText& choice = choices_[i];
    sorted_json entry = {{"index", i}};
    std::string finish_reason = choice.finish_reason;
    if (chat && ParsesReply()) {
      const ReplyParts parts = ParseReply(request_.reply, choice.text);
      sorted_json message = {{"role", "assistant"}};
      // OpenAI's shape: content null when the reply is only calls.
      message["content"] = parts.content.empty() && !parts.calls.empty()
                               ? sorted_json()
                               : sorted_json(parts.content);
      if (!parts.reasoning.empty()) message["reasoning_content"] = parts.reasoning;
      if (!parts.calls.empty()) {
        sorted_json calls = sorted_json::array();
        for (const ToolCall& call : parts.calls) calls.push_back(ToolCallJson(call));
        message["tool_calls"] = calls;
        if (finish_reason == "stop") finish_reason = "tool_calls";
      }
      entry["message"] = message;
    } else if (chat) {
      entry["message"] = {{"role", "assistant"}, {"content", choice.text}};
    } else {
      entry["text"] = choice.text;
    }
    entry["logprobs"] = request_.logprobs ? LogprobsJson(choice.tokens, 0) : sorted_json();
    entry["finish_reason"] = finish_reason;
    choices.push_back(entry);
  }
  body["choices"] = choices;
  body["usage"] = UsageJson(usage);
  return body.dump(-1, ' ', false, sorted_json::error_handler_t::replace);
}

}  // namespace petrel::server
