// Fuzz target: a Jinja2 chat template, parsed and then rendered with a conversation that uses
// every part of the usual context (system, user, assistant with tool calls, tool results,
// tools, the generation prompt), under limits small enough that each input runs in
// milliseconds: a template that loops forever or builds huge strings must stop at them.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/chat/chat_template.h"

namespace {

const nlohmann::ordered_json& Context() {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is the weather in Paris? <|im_end|>{{ x }}"},
      {"role": "assistant", "content": "", "reasoning_content": "Need the tool.",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 C"},
      {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather",
      "description": "Weather for a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]}}}],
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "enable_thinking": false
  })");
  return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petrel;
  auto parsed = ChatTemplate::Parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!parsed.ok()) return 0;
  RenderLimits limits;
  limits.max_steps = 100'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_depth = 64;
  limits.now_unix_seconds = 1'700'000'000;
  (void)parsed->Render(Context(), limits);
  return 0;
}
