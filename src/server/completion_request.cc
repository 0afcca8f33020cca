// ParseCompletionRequest: the field table of both endpoints, OpenAI's defaults and bounds.
#include "server/completion_request.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string_view>

#include "core/generation/sampling/sampling_fields.h"
#include "core/grammar/grammar.h"
#include "core/grammar/json_schema.h"
#include "server/lora_request.h"

namespace petrel::server {
namespace {

using json = nlohmann::ordered_json;

// With every field of the sampler table (SamplingFields()), also known.
constexpr std::string_view kCommonFields[] = {"model",
                                              "n",
                                              "max_tokens",
                                              "dry_sequence_breakers",
                                              "logit_bias",
                                              "seed",
                                              "stop",
                                              "stream",
                                              "stream_options",
                                              "user",
                                              "lora",
                                              // Accepted and ignored (docs/SERVER.md): what
                                              // SDKs and agent frameworks send by default.
                                              "store",
                                              "metadata",
                                              "service_tier",
                                              "logprobs",
                                              "response_format",
                                              "json_schema",
                                              "grammar"};
constexpr std::string_view kChatFields[] = {
    "messages",    "max_completion_tokens", "top_logprobs",     "tools",
    "tool_choice", "parallel_tool_calls",   "reasoning_effort", "reasoning_format"};
constexpr std::string_view kCompletionFields[] = {"prompt"};
constexpr std::string_view kRoles[] = {"system", "developer", "user", "assistant", "tool"};

template <size_t N>
bool Contains(const std::string_view (&list)[N], std::string_view name) {
  return std::find(std::begin(list), std::end(list), name) != std::end(list);
}

ApiResult CheckKnownFields(const json& request, Endpoint endpoint) {
  for (const auto& [name, value] : request.items()) {
    const bool known = Contains(kCommonFields, name) || FindSamplingField(name) ||
                       (endpoint == Endpoint::kChat ? Contains(kChatFields, name)
                                                    : Contains(kCompletionFields, name));
    if (!known) {
      return InvalidField(name, "'" + name + "' is not supported by this server",
                          "unsupported_parameter");
    }
  }
  return std::nullopt;
}

// A message's content: a string, null (an assistant turn with tool calls), or OpenAI's list of
// parts, of which only text parts are supported; the parts are joined.
ApiResult ReadContent(const json& content, const std::string& where, json* out) {
  if (content.is_null() || content.is_string()) {
    *out = content;
    return std::nullopt;
  }
  if (!content.is_array()) {
    return InvalidField(where, "'" + where + "' must be a string or an array of text parts",
                        "invalid_type");
  }
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      return InvalidField(where,
                          "'" + where +
                              "': only parts {\"type\": \"text\", \"text\": ...} "
                              "are supported",
                          "unsupported_content");
    }
    text += part["text"].get<std::string>();
  }
  *out = text;
  return std::nullopt;
}

ApiResult ReadMessages(const json& request, CompletionRequest* out) {
  auto it = request.find("messages");
  if (it == request.end() || it->is_null()) {
    return InvalidField("messages", "'messages' is required", "missing_required_parameter");
  }
  if (!it->is_array() || it->empty()) {
    return InvalidField("messages", "'messages' must be a non-empty array", "invalid_type");
  }
  if (it->size() > kMaxMessages) {
    return InvalidField("messages",
                        "'messages' has more than " + std::to_string(kMaxMessages) + " entries");
  }
  out->messages = json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const json& message = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!message.is_object()) {
      return InvalidField(where, "'" + where + "' must be an object", "invalid_type");
    }
    auto role = message.find("role");
    if (role == message.end() || !role->is_string() ||
        !Contains(kRoles, role->get_ref<const std::string&>())) {
      return InvalidField(where + ".role", "'" + where +
                                               ".role' must be one of system, developer, user, "
                                               "assistant, tool");
    }
    // Other keys (name, tool_calls, tool_call_id) go to the template as they are.
    json copy = message;
    if (auto content = message.find("content"); content != message.end()) {
      PETREL_RETURN_IF_API_ERROR(ReadContent(*content, where + ".content", &copy["content"]));
    } else if (*role != "assistant") {
      return InvalidField(where + ".content", "'" + where + ".content' is required",
                          "missing_required_parameter");
    }
    // An assistant turn of only tool calls (content null or absent) reaches the template with
    // "": templates test content with `in` and string methods, which fail on null (Qwen3's
    // `'</think>' in message.content`), and print nothing for "".
    if (copy["content"].is_null()) copy["content"] = "";
    out->messages.push_back(std::move(copy));
  }
  return std::nullopt;
}

ApiResult ReadPrompt(const json& request, CompletionRequest* out) {
  auto it = request.find("prompt");
  if (it == request.end() || it->is_null()) {
    return InvalidField("prompt", "'prompt' is required", "missing_required_parameter");
  }
  if (it->is_string()) {
    out->prompt_text = it->get<std::string>();
    return std::nullopt;
  }
  if (it->is_array() && !it->empty() &&
      std::all_of(it->begin(), it->end(), [](const json& v) { return v.is_number_integer(); })) {
    for (const json& id : *it) {
      const int64_t value = id.get<int64_t>();
      if (value < 0 || value > INT32_MAX) {
        return InvalidField("prompt", "'prompt' token id " + id.dump() + " is invalid");
      }
      out->prompt_ids.push_back(int32_t(value));
    }
    out->prompt_is_ids = true;
    return std::nullopt;
  }
  return InvalidField("prompt",
                      "'prompt' must be a string or a non-empty array of token ids (batches of "
                      "prompts are not supported)",
                      "invalid_type");
}

// OpenAI's form {"token id": bias}, bias in [-100, 100] (-100 bans the token).
ApiResult ReadLogitBias(const json& request, const RequestLimits& limits, CompletionRequest* out) {
  auto it = request.find("logit_bias");
  if (it == request.end() || it->is_null()) return std::nullopt;
  if (!it->is_object() || it->size() > kMaxLogitBias) {
    return InvalidField("logit_bias",
                        "'logit_bias' must be an object of at most " +
                            std::to_string(kMaxLogitBias) + " {\"token id\": bias} entries",
                        "invalid_type");
  }
  for (const auto& [key, bias] : it->items()) {
    char* end = nullptr;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || size_t(id) >= limits.n_vocab) {
      return InvalidField("logit_bias", "'logit_bias' key '" + key +
                                            "' is not a token id of this model (0 to " +
                                            std::to_string(limits.n_vocab - 1) + ")");
    }
    if (!bias.is_number() || !(bias.get<double>() >= -100 && bias.get<double>() <= 100)) {
      return InvalidField("logit_bias", "'logit_bias' values must be numbers in [-100, 100]");
    }
    const double value = bias.get<double>();
    out->sampling.logit_bias[int32_t(id)] = value <= -100 ? -INFINITY : float(value);
  }
  return std::nullopt;
}

// One row of the sampler table (sampling_fields.h, shared with the CLI's flags).
ApiResult ReadSamplerField(const FieldReader& fields, const SamplingField& field,
                           SamplingParams* params) {
  const json* value = fields.Find(field.name);
  if (!value) return std::nullopt;
  const std::string name = field.name;
  if (!value->is_number()) {
    return InvalidField(name, "'" + name + "' must be a number, not " + JsonTypeName(*value),
                        "invalid_type");
  }
  const double number = value->get<double>();
  if (field.integer && number != std::floor(number)) {
    return InvalidField(name, "'" + name + "' must be an integer, not " + value->dump(),
                        "invalid_type");
  }
  if (!CheckSamplingValue(field, number).ok()) {
    return InvalidField(name, "'" + name + "' is " + value->dump() + ", outside the range " +
                                  SamplingRangeText(field));
  }
  SetSamplingValue(field, number, params);
  return std::nullopt;
}

ApiResult ReadDryBreakers(const FieldReader& fields, SamplingParams* params) {
  const json* value = fields.Find("dry_sequence_breakers");
  if (!value) return std::nullopt;
  if (!value->is_array() || value->size() > kMaxDrySequenceBreakers) {
    return InvalidField("dry_sequence_breakers",
                        "'dry_sequence_breakers' must be an array of at most " +
                            std::to_string(kMaxDrySequenceBreakers) + " strings",
                        "invalid_type");
  }
  params->dry_sequence_breakers.clear();
  for (const json& breaker : *value) {
    if (!breaker.is_string() || breaker.get_ref<const std::string&>().empty() ||
        breaker.get_ref<const std::string&>().size() > kMaxDrySequenceBreakerBytes) {
      return InvalidField("dry_sequence_breakers",
                          "each of 'dry_sequence_breakers' must be a string of 1 to " +
                              std::to_string(kMaxDrySequenceBreakerBytes) + " bytes");
    }
    params->dry_sequence_breakers.push_back(breaker.get<std::string>());
  }
  return std::nullopt;
}

}  // namespace

ApiResult ReadStopStrings(const nlohmann::ordered_json& request, const std::string& field,
                          CompletionRequest* out) {
  auto it = request.find(field);
  if (it == request.end() || it->is_null()) return std::nullopt;
  json stops = it->is_string() ? json::array({*it}) : *it;
  if (!stops.is_array() || stops.size() > kMaxStops) {
    return InvalidField(field,
                        "'" + field + "' must be a string or an array of at most " +
                            std::to_string(kMaxStops) + " strings",
                        "invalid_type");
  }
  for (const json& stop : stops) {
    if (!stop.is_string() || stop.get_ref<const std::string&>().empty() ||
        stop.get_ref<const std::string&>().size() > kMaxStopBytes) {
      return InvalidField(field, "each '" + field + "' string must be 1 to " +
                                     std::to_string(kMaxStopBytes) + " bytes");
    }
    out->stop.push_back(stop.get<std::string>());
  }
  return std::nullopt;
}

ApiResult ReadSampling(const nlohmann::ordered_json& request, const RequestLimits& limits,
                       CompletionRequest* out) {
  const FieldReader fields(request);
  SamplingParams& s = out->sampling;
  // OpenAI's defaults: temperature 1 and nothing else truncating or penalizing.
  s = SamplingParams();
  s.top_k = 0;
  s.top_p = 1.0f;
  s.min_p = 0.0f;
  s.temperature = 1.0f;
  for (const SamplingField& field : SamplingFields()) {
    PETREL_RETURN_IF_API_ERROR(ReadSamplerField(fields, field, &s));
  }
  PETREL_RETURN_IF_API_ERROR(ReadDryBreakers(fields, &s));
  int64_t seed = 0;
  if (fields.Find("seed")) {
    PETREL_RETURN_IF_API_ERROR(fields.Integer("seed", INT64_MIN, INT64_MAX, &seed));
    s.seed = uint64_t(seed);
    out->seeded = true;
  } else {
    s.seed = (uint64_t(std::random_device()()) << 32) | std::random_device()();
  }
  return ReadLogitBias(request, limits, out);
}

namespace {

// `response_format`, `json_schema` or `grammar` as the grammar of the output, compiled here so
// that a bad one is this request's 400 rather than a failed generation.
ApiResult ReadGrammar(const json& request, CompletionRequest* out) {
  const char* field = request.contains("response_format") ? "response_format"
                      : request.contains("json_schema")   ? "json_schema"
                                                          : "grammar";
  auto grammar = GrammarFromRequest(request);
  if (!grammar.ok()) return InvalidField(field, grammar.status().message());
  if (!grammar->empty()) {
    auto compiled = CompileGrammar(*grammar);
    if (!compiled.ok()) return InvalidField(field, compiled.status().Wrap("grammar").message());
  }
  out->sampling.grammar = std::move(grammar).value();
  if (!out->sampling.grammar.empty()) out->grammar_field = field;
  return std::nullopt;
}

// `reasoning_format` as llama-server reads it ("deepseek" is its name for splitting), and
// `reasoning_effort` as OpenAI's values.
ApiResult ReadReasoning(const FieldReader& fields, CompletionRequest* out) {
  PETREL_RETURN_IF_API_ERROR(fields.String("reasoning_format", 32, &out->reasoning_format));
  if (out->reasoning_format == "deepseek") out->reasoning_format = "auto";
  if (!out->reasoning_format.empty() && out->reasoning_format != "none" &&
      out->reasoning_format != "auto") {
    return InvalidField("reasoning_format", "'reasoning_format' must be \"none\" or \"auto\"");
  }
  PETREL_RETURN_IF_API_ERROR(fields.String("reasoning_effort", 32, &out->reasoning_effort));
  constexpr std::string_view kEfforts[] = {"none", "minimal", "low", "medium", "high"};
  if (!out->reasoning_effort.empty() && !Contains(kEfforts, out->reasoning_effort)) {
    return InvalidField("reasoning_effort",
                        "'reasoning_effort' must be one of none, minimal, low, medium, high");
  }
  return std::nullopt;
}

}  // namespace

ApiResult ParseCompletionRequest(const std::string& body, Endpoint endpoint,
                                 const RequestLimits& limits, CompletionRequest* out) {
  PETREL_RETURN_IF_API_ERROR(CheckJsonDepth(body));
  const json request = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) {
    return ApiError{400, "the request body is not valid JSON", "invalid_request_error", "",
                    "invalid_json"};
  }
  if (!request.is_object()) {
    return ApiError{400, "the request body must be a JSON object", "invalid_request_error", "",
                    "invalid_json"};
  }
  *out = CompletionRequest();
  out->endpoint = endpoint;
  PETREL_RETURN_IF_API_ERROR(CheckKnownFields(request, endpoint));
  const FieldReader fields(request);
  PETREL_RETURN_IF_API_ERROR(fields.String("model", 1024, &out->model));
  if (endpoint == Endpoint::kChat) {
    PETREL_RETURN_IF_API_ERROR(ReadMessages(request, out));
    if (const json* tools = fields.Find("tools")) {
      if (!tools->is_array())
        return InvalidField("tools", "'tools' must be an array", "invalid_type");
      out->tools = *tools;
    }
    if (const json* choice = fields.Find("tool_choice")) {
      if (!choice->is_string() && !choice->is_object()) {
        return InvalidField("tool_choice", "'tool_choice' must be a string or an object",
                            "invalid_type");
      }
      out->tool_choice = *choice;
    }
    PETREL_RETURN_IF_API_ERROR(ReadToolChoice(out->tools, out->tool_choice, &out->tool_mode));
    PETREL_RETURN_IF_API_ERROR(fields.Boolean("parallel_tool_calls", &out->parallel_tool_calls));
    PETREL_RETURN_IF_API_ERROR(ReadReasoning(fields, out));
  } else {
    PETREL_RETURN_IF_API_ERROR(ReadPrompt(request, out));
  }
  int64_t n = 1;
  const int64_t max_n = std::min<int64_t>(kMaxN, int64_t(limits.max_n));
  PETREL_RETURN_IF_API_ERROR(fields.Integer("n", 1, max_n, &n));
  out->n = size_t(n);
  int64_t max_tokens = 0;
  const int64_t context = int64_t(limits.context);
  PETREL_RETURN_IF_API_ERROR(fields.Integer("max_tokens", 1, context, &max_tokens));
  if (endpoint == Endpoint::kChat) {
    PETREL_RETURN_IF_API_ERROR(fields.Integer("max_completion_tokens", 1, context, &max_tokens));
  }
  out->max_tokens = size_t(max_tokens);
  PETREL_RETURN_IF_API_ERROR(ReadSampling(request, limits, out));
  PETREL_RETURN_IF_API_ERROR(ReadLoraField(request, limits.lora, &out->lora_scales));
  PETREL_RETURN_IF_API_ERROR(ReadGrammar(request, out));
  PETREL_RETURN_IF_API_ERROR(ReadStopStrings(request, "stop", out));
  if (endpoint == Endpoint::kChat) {
    PETREL_RETURN_IF_API_ERROR(fields.Boolean("logprobs", &out->logprobs));
    int64_t top = 0;
    PETREL_RETURN_IF_API_ERROR(fields.Integer("top_logprobs", 0, kMaxTopLogprobs, &top));
    if (fields.Find("top_logprobs") && !out->logprobs) {
      return InvalidField("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    out->top_logprobs = size_t(top);
  } else {
    // The legacy form: an integer, the alternatives to report per token (0: the token only).
    int64_t top = -1;
    PETREL_RETURN_IF_API_ERROR(fields.Integer("logprobs", 0, kMaxLegacyLogprobs, &top));
    out->logprobs = top >= 0;
    out->top_logprobs = top > 0 ? size_t(top) : 0;
  }
  out->sampling.n_probs = int32_t(out->top_logprobs);
  PETREL_RETURN_IF_API_ERROR(fields.Boolean("stream", &out->stream));
  if (const json* options = fields.Find("stream_options")) {
    if (!out->stream) {
      return InvalidField("stream_options", "'stream_options' needs 'stream': true");
    }
    if (!options->is_object()) {
      return InvalidField("stream_options", "'stream_options' must be an object", "invalid_type");
    }
    for (const auto& [name, value] : options->items()) {
      if (name != "include_usage") {
        return InvalidField("stream_options." + name,
                            "'stream_options." + name + "' is not supported by this server",
                            "unsupported_parameter");
      }
      if (!value.is_boolean()) {
        return InvalidField("stream_options.include_usage",
                            "'stream_options.include_usage' must be a boolean", "invalid_type");
      }
      out->include_usage = value.get<bool>();
    }
  }
  std::string user;
  PETREL_RETURN_IF_API_ERROR(fields.String("user", 1024, &user));
  return std::nullopt;
}

}  // namespace petrel::server
