// A validated /v1/chat/completions or /v1/completions request: every field the server supports,
// each checked for type and range; any other field is refused, never ignored.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/generation/sampling/sampler.h"  // SamplingParams
#include "core/model/lora_adapter.h"            // LoraFile
#include "server/json_fields.h"
#include "server/reply_parser.h"
#include "server/tool_call_grammar.h"

namespace petrel::server {

enum class Endpoint { kChat, kCompletion };

// What a request may ask for on this server.
struct RequestLimits {
  size_t context = 0;  // tokens per sequence: max_tokens at most this
  size_t n_vocab = 0;  // logit_bias ids below this
  size_t max_n = 1;    // `n` at most this (--parallel: the choices run side by side)
  std::span<const LoraFile> lora;  // the adapters `lora` may name (serve --lora)
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChat;
  // The field the output grammar came from (response_format, json_schema, grammar), for errors.
  std::string grammar_field;
  std::string model;
  // Chat: the messages (content parts joined into strings), and `tools` / `tool_choice` for the
  // template (null when absent).
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;
  nlohmann::ordered_json tool_choice;
  ToolChoice tool_mode;  // tool_choice as read against `tools`
  bool parallel_tool_calls = true;
  std::string reasoning_format;  // "none" or "auto"; "" for the server's --reasoning-format
  std::string reasoning_effort;  // a template variable when given
  // How the reply is read back (tool calls, reasoning): set from the model's chat template.
  ReplyParsing reply;
  // Completions: a text prompt, or token ids.
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  size_t n = 1;
  size_t max_tokens = 0;  // 0: until the context is full
  SamplingParams sampling;
  bool seeded = false;  // `seed` was given (else each request draws one)
  std::vector<std::string> stop;
  bool logprobs = false;
  size_t top_logprobs = 0;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // `lora`: one scale per loaded adapter (0: not applied); empty: the scales they were loaded
  // with (Engine::SetSequenceLora).
  std::vector<float> lora_scales;
};

// Parses and checks `body`; a 400 names the first bad field.
ApiResult ParseCompletionRequest(const std::string& body, Endpoint endpoint,
                                 const RequestLimits& limits, CompletionRequest* out);

// The sampler's fields (the table shared with the CLI, sampling_fields.h), `seed` and
// `logit_bias` into out->sampling, over OpenAI's defaults (temperature 1, no truncation); sets
// out->seeded. For every endpoint that samples.
ApiResult ReadSampling(const nlohmann::ordered_json& request, const RequestLimits& limits,
                       CompletionRequest* out);

// Stop strings from `field` (a string or an array of them; "stop", or Anthropic's
// "stop_sequences") appended to out->stop.
ApiResult ReadStopStrings(const nlohmann::ordered_json& request, const std::string& field,
                          CompletionRequest* out);

// The limits of every bounded field, in one place for the parser, SERVER.md and the tests.
inline constexpr int64_t kMaxN = 16;
inline constexpr size_t kMaxStops = 4;
inline constexpr size_t kMaxStopBytes = 256;
inline constexpr int64_t kMaxTopLogprobs = 20;    // chat `top_logprobs`
inline constexpr int64_t kMaxLegacyLogprobs = 5;  // completions `logprobs`
inline constexpr size_t kMaxMessages = 4096;
inline constexpr size_t kMaxLogitBias = 1024;

}  // namespace petrel::server
