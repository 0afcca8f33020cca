// SplitReasoning: the think block at the reply's start, and the stream's diffing.
#include "server/reasoning.h"

#include <algorithm>

namespace petrel::server {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  return s;
}
std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}
size_t MarkerPrefixAtEnd(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (marker.substr(0, n) == text.substr(text.size() - n)) return n;
  }
  return 0;
}

}  // namespace

bool TemplateUsesThinkTags(std::string_view chat_template) {
  return chat_template.find(kOpen) != std::string_view::npos ||
         chat_template.find(kClose) != std::string_view::npos;
}

bool PromptOpensReasoning(std::string_view prompt_text) {
  const std::string_view tail = TrimRight(prompt_text);
  return tail.size() >= kOpen.size() && tail.substr(tail.size() - kOpen.size()) == kOpen;
}

ReasoningSplit SplitReasoning(std::string_view text, bool starts_inside, bool final) {
  ReasoningSplit split;
  std::string_view inside;
  if (starts_inside) {
    inside = text;
  } else {
    const std::string_view lead = TrimLeft(text);
    if (lead.substr(0, kOpen.size()) == kOpen) {
      inside = lead.substr(kOpen.size());
    } else if (!final && kOpen.substr(0, std::min(lead.size(), kOpen.size())) == lead) {
      return split;  // may still open a block: nothing is known
    } else {
      split.content = std::string(text);
      return split;
    }
  }
  const size_t close = inside.find(kClose);
  if (close == std::string_view::npos) {
    std::string_view reasoning = inside;
    if (!final) reasoning.remove_suffix(MarkerPrefixAtEnd(reasoning, kClose));
    split.reasoning = std::string(TrimRight(TrimLeft(reasoning)));
    return split;
  }
  split.reasoning = std::string(TrimRight(TrimLeft(inside.substr(0, close))));
  split.content = std::string(TrimLeft(inside.substr(close + kClose.size())));
  return split;
}

ReasoningSplit ReasoningStream::Diff(const ReasoningSplit& split) {
  ReasoningSplit delta;
  if (split.reasoning.size() > reasoning_sent_) {
    delta.reasoning = split.reasoning.substr(reasoning_sent_);
    reasoning_sent_ = split.reasoning.size();
  }
  if (split.content.size() > content_sent_) {
    delta.content = split.content.substr(content_sent_);
    content_sent_ = split.content.size();
  }
  return delta;
}

ReasoningSplit ReasoningStream::Push(std::string_view text) {
  text_.append(text);
  return Diff(SplitReasoning(text_, starts_inside_, false));
}

ReasoningSplit ReasoningStream::Finish() {
  return Diff(SplitReasoning(text_, starts_inside_, true));
}

}  // namespace petrel::server
