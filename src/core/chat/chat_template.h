// The public face of the chat-template engine: parse a Jinja2 chat template once, render it with
// a JSON context, exactly as Hugging Face transformers' `apply_chat_template` (jinja2 with
// trim_blocks, lstrip_blocks, the immutable sandbox, `raise_exception`, `strftime_now` and a
// non-escaping `tojson`).
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "core/chat/interpreter.h"  // RenderLimits
#include "core/base/status.h"

namespace petrel::chat {
struct Node;
}

namespace petrel {

using chat::RenderLimits;

class ChatTemplate {
 public:
  // Parses `source`; syntax errors read "line:column: message".
  static Result<ChatTemplate> Parse(std::string_view source);

  // Renders with the variables of `context`, a JSON object (`messages`, `tools`,
  // `add_generation_prompt`, `bos_token`, ...). Keys keep their order with `ordered_json`; a
  // plain `json` has sorted them already, which shows in `tojson` and in printed dicts. A
  // template's `raise_exception(message)` fails with exactly `message`; other errors read
  // "line:column: message".
  Result<std::string> Render(const nlohmann::ordered_json& context,
                             const RenderLimits& limits = {}) const;
  Result<std::string> Render(const nlohmann::json& context, const RenderLimits& limits = {}) const;

 private:
  struct Program;
  explicit ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  Result<std::string> RenderValue(const chat::Value& context, const RenderLimits& limits) const;

  // Shared and immutable: copies of a ChatTemplate are cheap and may render concurrently.
  std::shared_ptr<const Program> program_;
};

}  // namespace petrel
