// ChatTemplate: lex + parse once, render per request (see chat_template.h).
#include "core/chat/chat_template.h"

#include <nlohmann/json.hpp>

#include "core/chat/lexer.h"
#include "core/chat/parser.h"

namespace petrel {

struct ChatTemplate::Program {
  chat::NodeList nodes;
};

Result<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  PETREL_ASSIGN_OR_RETURN(std::vector<chat::Token> tokens, chat::Lex(source));
  PETREL_ASSIGN_OR_RETURN(chat::NodeList nodes, chat::Parse(std::move(tokens)));
  auto program = std::make_shared<Program>();
  program->nodes = std::move(nodes);
  return ChatTemplate(std::move(program));
}

Result<std::string> ChatTemplate::RenderValue(const chat::Value& context,
                                              const RenderLimits& limits) const {
  if (!context.is_dict()) return Error("chat template context must be a JSON object");
  chat::Interpreter interpreter(limits);
  return interpreter.Render(program_->nodes, context);
}

Result<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context,
                                         const RenderLimits& limits) const {
  return RenderValue(chat::Value::FromJson(context), limits);
}

Result<std::string> ChatTemplate::Render(const nlohmann::json& context,
                                         const RenderLimits& limits) const {
  return RenderValue(chat::Value::FromJson(context), limits);
}

}  // namespace petrel
