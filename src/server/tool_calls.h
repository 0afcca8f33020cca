// Tool calls in a model's output: the call syntaxes chat templates teach their models, found in
// the generated text and turned into OpenAI's `tool_calls` (whole, or as streamed deltas).
//
// Formats (docs/SERVER.md, "Tool calls"):
//   hermes   <tool_call>{"name": …, "arguments": {…}}</tool_call>, any number, text around them
//            (Hermes 2/3, Qwen 2.5/3, and the templates that copied them).
//   llama3   the whole reply is {"name": …, "parameters": {…}} (several joined by ';'), optionally
//            after <|python_tag|> (Llama 3.1-3.3).
//   mistral  [TOOL_CALLS][{"name": …, "arguments": {…}}, …] (Nemo) or
//            [TOOL_CALLS]name[CALL_ID]id[ARGS]{…} / [TOOL_CALLS]name[ARGS]{…} (Small 3.2,
//            Devstral); the marker is a control token the text may lack, so a reply that is a
//            bare JSON array of calls is read as one too.
//   generic  the whole reply is a JSON object {"tool_calls": [{name, arguments}, …]},
//            {"tool_call": {…}} or {"name": …, "arguments": …} (templates with no syntax of
//            their own).
//   harmony  gpt-oss's channels: <|channel|>commentary to=functions.NAME <|constrain|>json
//            <|message|>{…}<|call|>; its analysis channel is the reasoning (server/harmony.h).
// A call whose JSON does not parse, or that names no function, stays in the content as text.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace petrel::server {

enum class ToolCallFormat { kHermes, kLlama3, kMistral, kGeneric, kHarmony };

// The format a chat template's own tool-call rendering shows (the markers it emits); kGeneric
// when it shows none.
ToolCallFormat DetectToolCallFormat(std::string_view chat_template);
// "hermes", "llama3", "mistral", "generic", "harmony" (the --tool-call-format values); nullopt
// otherwise.
std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name);
const char* ToolCallFormatName(ToolCallFormat format);

struct ToolCall {
  std::string id;  // from the model's text when it wrote one (Mistral), else ""
  std::string name;
  std::string arguments;  // a JSON text (an object, as OpenAI sends it)
};

struct ParsedToolCalls {
  std::string content;  // the text outside the calls (whitespace next to a call trimmed)
  std::vector<ToolCall> calls;
  std::string reasoning;  // harmony only: its analysis channel
  // Partial text only: bytes at the end held back because they may still become a call (a
  // marker's prefix, a call not yet closed, whitespace before a possible call).
  size_t held = 0;
};

// How a harmony reply is read (the other formats have no options).
struct HarmonyOptions {
  bool calls = true;                 // messages to functions.NAME become calls (else content)
  bool analysis_to_content = false;  // reasoning_format "none": the analysis is content too
};

// `text` is a whole reply when `final`, else the reply so far: then `content` holds only what no
// later byte can turn into a call, and `calls` only closed calls. The partial result's content
// is always a prefix of the final result's, and its calls the first of the final calls.
ParsedToolCalls ParseToolCalls(ToolCallFormat format, std::string_view text, bool final,
                               const HarmonyOptions& harmony = {});

// A streamed reply's tool-call view: feed the text as it comes; each call says what is new.
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallFormat format, const HarmonyOptions& harmony = {})
      : format_(format), harmony_(harmony) {}

  struct Delta {
    std::string content;          // new content text
    std::string reasoning;        // new reasoning text (harmony)
    std::vector<ToolCall> calls;  // calls completed since the last delta
    size_t first_call_index = 0;  // the index of calls[0] among the reply's calls
  };
  Delta Push(std::string_view text);
  Delta Finish();  // the end of the reply: what was held back is resolved
  size_t calls_sent() const { return calls_sent_; }

 private:
  Delta Diff(const ParsedToolCalls& parsed);

  ToolCallFormat format_;
  HarmonyOptions harmony_;
  std::string text_;
  size_t content_sent_ = 0;
  size_t reasoning_sent_ = 0;
  size_t calls_sent_ = 0;
};

// An OpenAI tool-call id: "call_" and 24 random letters and digits.
std::string NewToolCallId();

}  // namespace petrel::server
