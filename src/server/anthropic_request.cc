// ParseMessagesRequest: Anthropic's request fields and content blocks in the chat endpoint's form.
#include "server/anthropic_request.h"

#include <algorithm>
#include <string_view>

#include "core/generation/sampling/sampling_fields.h"
#include "server/lora_request.h"

namespace petrel::server {
namespace {

using json = nlohmann::ordered_json;

// Beside these, every field of the sampler table (SamplingFields()) is known.
constexpr std::string_view kFields[] = {
    "model", "messages",    "system",   "max_tokens", "stop_sequences", "stream",
    "tools", "tool_choice", "metadata", "seed",       "logit_bias",     "dry_sequence_breakers",
    "lora"};

ApiResult Invalid(const std::string& where, const std::string& message,
                  const std::string& code = "invalid_value") {
  return InvalidField(where, "'" + where + "' " + message, code);
}

// A string, or an array of {"type": "text", "text"} blocks (`system`, a tool_result's content).
ApiResult ReadText(const json& value, const std::string& where, std::string* out) {
  if (value.is_string()) {
    *out = value.get<std::string>();
    return std::nullopt;
  }
  if (!value.is_array()) return Invalid(where, "must be a string or an array of text blocks");
  out->clear();
  for (size_t i = 0; i < value.size(); ++i) {
    const json& block = value[i];
    if (!block.is_object() || block.value("type", json()) != "text" || !block.contains("text") ||
        !block["text"].is_string()) {
      return Invalid(where + "[" + std::to_string(i) + "]",
                     "must be {\"type\": \"text\", \"text\": …} (only text blocks are supported "
                     "here)",
                     "unsupported_content");
    }
    *out += block["text"].get<std::string>();
  }
  return std::nullopt;
}

// An assistant turn: its text blocks joined, its tool_use blocks as OpenAI's tool_calls (the
// form chat templates render).
ApiResult ReadAssistant(const json& content, const std::string& where, json* messages) {
  json message = {{"role", "assistant"}};
  if (content.is_string()) {
    message["content"] = content;
    messages->push_back(std::move(message));
    return std::nullopt;
  }
  std::string text;
  json calls = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const json& block = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    const std::string type = block.is_object() ? block.value("type", std::string()) : "";
    if (type == "text" && block.contains("text") && block["text"].is_string()) {
      text += block["text"].get<std::string>();
    } else if (type == "tool_use") {
      if (!block.contains("id") || !block["id"].is_string() || !block.contains("name") ||
          !block["name"].is_string() || !block.contains("input") || !block["input"].is_object()) {
        return Invalid(at, "must be {\"type\": \"tool_use\", \"id\", \"name\", \"input\": {…}}",
                       "invalid_type");
      }
      calls.push_back({{"id", block["id"]},
                       {"type", "function"},
                       {"function", {{"name", block["name"]}, {"arguments", block["input"]}}}});
    } else if (type == "thinking" || type == "redacted_thinking") {
      // Earlier reasoning, as OpenAI clients leave out reasoning_content: not sent back.
    } else {
      return Invalid(at, "must be a text or tool_use block in an assistant message",
                     "unsupported_content");
    }
  }
  // A string even when empty: templates test it with `in` and string methods, which fail on
  // null (Qwen3's `'</think>' in message.content`).
  message["content"] = text;
  if (!calls.empty()) message["tool_calls"] = std::move(calls);
  messages->push_back(std::move(message));
  return std::nullopt;
}

// A user turn: text blocks joined into user messages, each tool_result a tool message, in order.
ApiResult ReadUser(const json& content, const std::string& where, json* messages) {
  if (content.is_string()) {
    messages->push_back({{"role", "user"}, {"content", content}});
    return std::nullopt;
  }
  std::string text;
  bool has_text = false;
  auto flush = [&]() {
    if (has_text) messages->push_back({{"role", "user"}, {"content", text}});
    text.clear();
    has_text = false;
  };
  for (size_t i = 0; i < content.size(); ++i) {
    const json& block = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    const std::string type = block.is_object() ? block.value("type", std::string()) : "";
    if (type == "text" && block.contains("text") && block["text"].is_string()) {
      text += block["text"].get<std::string>();
      has_text = true;
    } else if (type == "tool_result") {
      if (!block.contains("tool_use_id") || !block["tool_use_id"].is_string()) {
        return Invalid(at + ".tool_use_id", "is required (a string)", "missing_required_parameter");
      }
      std::string result;
      if (block.contains("content") && !block["content"].is_null()) {
        PETREL_RETURN_IF_API_ERROR(ReadText(block["content"], at + ".content", &result));
      }
      flush();
      messages->push_back(
          {{"role", "tool"}, {"tool_call_id", block["tool_use_id"]}, {"content", result}});
    } else {
      return Invalid(at, "must be a text or tool_result block in a user message",
                     "unsupported_content");
    }
  }
  flush();
  return std::nullopt;
}

ApiResult ReadAnthropicMessages(const json& request, CompletionRequest* out) {
  out->messages = json::array();
  if (auto system = request.find("system"); system != request.end() && !system->is_null()) {
    std::string text;
    PETREL_RETURN_IF_API_ERROR(ReadText(*system, "system", &text));
    out->messages.push_back({{"role", "system"}, {"content", text}});
  }
  auto it = request.find("messages");
  if (it == request.end() || it->is_null()) {
    return Invalid("messages", "is required", "missing_required_parameter");
  }
  if (!it->is_array() || it->empty()) {
    return Invalid("messages", "must be a non-empty array", "invalid_type");
  }
  if (it->size() > kMaxMessages) {
    return Invalid("messages", "has more than " + std::to_string(kMaxMessages) + " entries");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& message = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!message.is_object()) return Invalid(where, "must be an object", "invalid_type");
    const json role = message.value("role", json());
    if (role != "user" && role != "assistant") {
      return Invalid(where + ".role", "must be \"user\" or \"assistant\"");
    }
    auto content = message.find("content");
    if (content == message.end() || !(content->is_string() || content->is_array())) {
      return Invalid(where + ".content", "must be a string or an array of content blocks",
                     content == message.end() ? "missing_required_parameter" : "invalid_type");
    }
    PETREL_RETURN_IF_API_ERROR(role == "user"
                                   ? ReadUser(*content, where + ".content", &out->messages)
                                   : ReadAssistant(*content, where + ".content", &out->messages));
  }
  return std::nullopt;
}

// Anthropic's tools ({name, description?, input_schema}) as OpenAI's function tools, and its
// tool_choice ({"type": "auto" | "any" | "tool" | "none", "name"?,
// "disable_parallel_tool_use"?}) as OpenAI's.
ApiResult ReadTools(const json& request, CompletionRequest* out) {
  if (auto tools = request.find("tools"); tools != request.end() && !tools->is_null()) {
    if (!tools->is_array()) return Invalid("tools", "must be an array", "invalid_type");
    out->tools = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& tool = (*tools)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string() ||
          tool["name"].get_ref<const std::string&>().empty() || !tool.contains("input_schema") ||
          !tool["input_schema"].is_object() ||
          (tool.contains("type") && tool["type"] != "custom")) {
        return Invalid(where,
                       "must be {\"name\", \"description\"?, \"input_schema\": {…}} (client "
                       "tools only)",
                       "invalid_type");
      }
      json function = {{"name", tool["name"]}, {"parameters", tool["input_schema"]}};
      if (tool.contains("description")) function["description"] = tool["description"];
      out->tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
  }
  if (auto choice = request.find("tool_choice"); choice != request.end() && !choice->is_null()) {
    const std::string type =
        choice->is_object() ? choice->value("type", std::string()) : std::string();
    if (type == "auto") {
      out->tool_choice = "auto";
    } else if (type == "any") {
      out->tool_choice = "required";
    } else if (type == "none") {
      out->tool_choice = "none";
    } else if (type == "tool" && choice->contains("name") && (*choice)["name"].is_string()) {
      out->tool_choice = {{"type", "function"}, {"function", {{"name", (*choice)["name"]}}}};
    } else {
      return Invalid("tool_choice",
                     "must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": \"none\"} or "
                     "{\"type\": \"tool\", \"name\": …}");
    }
    if (auto parallel = choice->find("disable_parallel_tool_use"); parallel != choice->end()) {
      if (!parallel->is_boolean()) {
        return Invalid("tool_choice.disable_parallel_tool_use", "must be a boolean",
                       "invalid_type");
      }
      out->parallel_tool_calls = !parallel->get<bool>();
    }
  }
  ApiResult error = ReadToolChoice(out->tools, out->tool_choice, &out->tool_mode);
  if (error && error->param == "tool_choice") {
    error->message =
        "'tool_choice' {\"type\": \"any\"} or {\"type\": \"tool\"} needs 'tools' "
        "naming that tool";
  }
  return error;
}

}  // namespace

std::string ToolUseId(const std::string& call_id) {
  constexpr std::string_view kCall = "call_";
  if (call_id.compare(0, kCall.size(), kCall) == 0) return "toolu_" + call_id.substr(kCall.size());
  return call_id;
}

ApiResult ParseMessagesRequest(const std::string& body, const RequestLimits& limits,
                               CompletionRequest* out) {
  PETREL_RETURN_IF_API_ERROR(CheckJsonDepth(body));
  const json request = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded() || !request.is_object()) {
    return ApiError{400, "the request body must be a JSON object", "invalid_request_error", "",
                    "invalid_json"};
  }
  *out = CompletionRequest();
  out->endpoint = Endpoint::kChat;
  for (const auto& [name, value] : request.items()) {
    if (std::find(std::begin(kFields), std::end(kFields), name) == std::end(kFields) &&
        !FindSamplingField(name)) {
      return InvalidField(name, "'" + name + "' is not supported by this server",
                          "unsupported_parameter");
    }
  }
  const FieldReader fields(request);
  PETREL_RETURN_IF_API_ERROR(fields.String("model", 1024, &out->model));
  PETREL_RETURN_IF_API_ERROR(ReadAnthropicMessages(request, out));
  if (!fields.Find("max_tokens")) {
    return Invalid("max_tokens", "is required", "missing_required_parameter");
  }
  int64_t max_tokens = 0;
  PETREL_RETURN_IF_API_ERROR(fields.Integer("max_tokens", 1, int64_t(limits.context), &max_tokens));
  out->max_tokens = size_t(max_tokens);
  PETREL_RETURN_IF_API_ERROR(ReadSampling(request, limits, out));
  PETREL_RETURN_IF_API_ERROR(ReadLoraField(request, limits.lora, &out->lora_scales));
  PETREL_RETURN_IF_API_ERROR(ReadStopStrings(request, "stop_sequences", out));
  PETREL_RETURN_IF_API_ERROR(ReadTools(request, out));
  PETREL_RETURN_IF_API_ERROR(fields.Boolean("stream", &out->stream));
  if (const json* metadata = fields.Find("metadata"); metadata && !metadata->is_object()) {
    return Invalid("metadata", "must be an object", "invalid_type");
  }
  return std::nullopt;
}

}  // namespace petrel::server
