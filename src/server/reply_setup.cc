// SetUpReplyParsing: the request's tool_choice and reasoning_format against the model's template.
#include "server/reply_setup.h"

#include "core/grammar/grammar.h"
#include "server/tool_call_grammar.h"

namespace petrel::server {

ApiResult SetUpReplyParsing(std::string_view template_source,
                            std::optional<ToolCallFormat> forced_format,
                            const std::string& server_reasoning_format,
                            std::string_view prompt_tail, CompletionRequest* request) {
  ReplyParsing& reply = request->reply;
  reply = ReplyParsing();
  reply.format = forced_format ? *forced_format : DetectToolCallFormat(template_source);
  reply.tool_calls = request->tool_mode.mode != ToolChoice::Mode::kNone;
  reply.single_call = !request->parallel_tool_calls;
  const std::string& reasoning =
      request->reasoning_format.empty() ? server_reasoning_format : request->reasoning_format;
  reply.harmony = reply.format == ToolCallFormat::kHarmony;
  reply.reasoning =
      reasoning == "auto" && (reply.harmony || TemplateUsesThinkTags(template_source));
  reply.starts_in_reasoning =
      reply.reasoning && !reply.harmony && PromptOpensReasoning(prompt_tail);

  const ToolChoice::Mode mode = request->tool_mode.mode;
  if (mode != ToolChoice::Mode::kRequired && mode != ToolChoice::Mode::kNamed) return std::nullopt;
  if (!request->sampling.grammar.empty()) {
    return InvalidField("tool_choice",
                        "'tool_choice' \"required\" or a named function cannot go "
                        "with '" +
                            request->grammar_field +
                            "' (both constrain "
                            "the output)");
  }
  // The grammar makes the reply start with the call: no think block to split (a harmony reply
  // is still read as messages: the grammar spells the call's header).
  reply.reasoning = reply.reasoning && reply.harmony;
  reply.starts_in_reasoning = false;
  auto grammar = ToolCallGrammar(reply.format, request->tools, request->tool_mode,
                                 request->parallel_tool_calls);
  if (!grammar.ok()) return InvalidField("tools", grammar.status().message());
  if (auto compiled = CompileGrammar(*grammar); !compiled.ok()) {
    return InvalidField("tools", compiled.status().Wrap("tool call grammar").message());
  }
  request->sampling.grammar = std::move(grammar).value();
  request->grammar_field = "tools";
  return std::nullopt;
}

}  // namespace petrel::server
