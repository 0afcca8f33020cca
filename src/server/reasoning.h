// A reasoning model's thinking, split from its answer: the text inside <think>…</think> becomes
// `reasoning_content` (whole, or streamed as its own deltas) and the rest `content`.
//
// Only a block at the very start of the reply counts (after whitespace), or the reply's start
// when the prompt itself ended by opening one (DeepSeek-R1's and QwQ's templates do). A block
// never closed is all reasoning. Whitespace at the block's edges and after it is trimmed.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace petrel::server {

// Whether the template speaks of think tags at all (reasoning_format "auto" splits only then).
bool TemplateUsesThinkTags(std::string_view chat_template);
// Whether the rendered prompt ends inside an opened <think> block.
bool PromptOpensReasoning(std::string_view prompt_text);

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

// `text` is the whole reply when `final`, else the reply so far: then both parts hold only what
// later bytes cannot change (each a prefix of the final part).
ReasoningSplit SplitReasoning(std::string_view text, bool starts_inside, bool final);

class ReasoningStream {
 public:
  explicit ReasoningStream(bool starts_inside) : starts_inside_(starts_inside) {}
  ReasoningSplit Push(std::string_view text);  // the new parts
  ReasoningSplit Finish();

 private:
  ReasoningSplit Diff(const ReasoningSplit& split);
  bool starts_inside_;
  std::string text_;
  size_t reasoning_sent_ = 0;
  size_t content_sent_ = 0;
};

}  // namespace petrel::server
