// Tool-call parsing: one scanner per format over the reply text, and the stream's diffing.
#include "server/tool_calls.h"

#include <nlohmann/json.hpp>
#include <random>

#include "server/harmony.h"

namespace petrel::server {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  return s;
}
std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// The length of the longest suffix of `text` that is a proper prefix of `marker` (the start of a
// marker that the next bytes may complete).
size_t MarkerPrefixAtEnd(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (marker.substr(0, n) == text.substr(text.size() - n)) return n;
  }
  return 0;
}

// Where the JSON value starting at `start` ({…}, […] or "…") ends (one past its last byte), by
// bracket matching outside strings; npos when the text ends first.
size_t JsonValueEnd(std::string_view s, size_t start) {
  if (start >= s.size()) return std::string_view::npos;
  if (s[start] == '"') {
    for (size_t i = start + 1; i < s.size(); ++i) {
      if (s[i] == '\\') {
        ++i;
      } else if (s[i] == '"') {
        return i + 1;
      }
    }
    return std::string_view::npos;
  }
  int depth = 0;
  bool in_string = false;
  for (size_t i = start; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
      if (depth < 0) return std::string_view::npos;
    }
  }
  return std::string_view::npos;
}

json ParseJson(std::string_view text) { return json::parse(text, nullptr, false); }

// OpenAI sends arguments as the JSON text of an object; a model may write the object or (as some
// templates render it back) a string holding it.
std::optional<std::string> ArgumentsText(const json& value) {
  if (value.is_object()) return value.dump();
  if (value.is_string()) {
    const json inner = ParseJson(value.get_ref<const std::string&>());
    if (inner.is_object()) return inner.dump();
  }
  return std::nullopt;
}

// {"name", "arguments"|"parameters", "id"?} or {"type": "function", "function": {…}}.
std::optional<ToolCall> CallFromJson(const json& value) {
  if (!value.is_object()) return std::nullopt;
  if (auto function = value.find("function"); function != value.end() && function->is_object()) {
    auto call = CallFromJson(*function);
    if (call && call->id.empty() && value.contains("id") && value["id"].is_string()) {
      call->id = value["id"].get<std::string>();
    }
    return call;
  }
  auto name = value.find("name");
  if (name == value.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  ToolCall call;
  call.name = name->get<std::string>();
  auto arguments = value.find("arguments");
  if (arguments == value.end()) arguments = value.find("parameters");
  if (arguments == value.end()) {
    call.arguments = "{}";
  } else if (auto text = ArgumentsText(*arguments)) {
    call.arguments = *text;
  } else {
    return std::nullopt;
  }
  if (auto id = value.find("id"); id != value.end() && id->is_string()) {
    call.id = id->get<std::string>();
  }
  return call;
}

std::optional<std::vector<ToolCall>> CallsFromArray(const json& value) {
  if (!value.is_array() || value.empty()) return std::nullopt;
  std::vector<ToolCall> calls;
  for (const json& item : value) {
    auto call = CallFromJson(item);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  }
  return calls;
}

// Builds the content from the text between calls: whitespace next to a call is not content.
class ContentBuilder {
 public:
  explicit ContentBuilder(ParsedToolCalls* out) : out_(out) {}
  void Text(std::string_view piece, bool call_follows) {
    if (after_call_) piece = TrimLeft(piece);
    if (call_follows) piece = TrimRight(piece);
    out_->content.append(piece);
    if (!piece.empty()) after_call_ = false;
  }
  void Call(ToolCall call) {
    out_->calls.push_back(std::move(call));
    after_call_ = true;
  }

 private:
  ParsedToolCalls* out_;
  bool after_call_ = false;
};

// A text with nothing resolved yet: all of it is content when final, held otherwise.
ParsedToolCalls AllContent(std::string_view text, bool final) {
  ParsedToolCalls result;
  if (final) {
    result.content = std::string(text);
  } else {
    result.held = text.size();
  }
  return result;
}

ParsedToolCalls ParseHermes(std::string_view text, bool final) {
  ParsedToolCalls result;
  ContentBuilder content(&result);
  size_t pos = 0;
  for (;;) {
    const size_t open = text.find(kHermesOpen, pos);
    if (open == std::string_view::npos) {
      std::string_view tail = text.substr(pos);
      if (final) {
        content.Text(tail, false);
      } else {
        const size_t held_from = text.size() - MarkerPrefixAtEnd(tail, kHermesOpen);
        const std::string_view kept = TrimRight(text.substr(pos, held_from - pos));
        content.Text(kept, false);
        result.held = text.size() - (pos + kept.size());
      }
      return result;
    }
    const size_t body = open + kHermesOpen.size();
    const size_t close = text.find(kHermesClose, body);
    if (close == std::string_view::npos && !final) {
      const std::string_view kept = TrimRight(text.substr(pos, open - pos));
      content.Text(kept, false);
      result.held = text.size() - (pos + kept.size());
      return result;
    }
    const size_t end = close == std::string_view::npos ? text.size() : close + kHermesClose.size();
    const std::string_view call_text =
        text.substr(body, (close == std::string_view::npos ? text.size() : close) - body);
    if (auto call = CallFromJson(ParseJson(call_text))) {
      content.Text(text.substr(pos, open - pos), true);
      content.Call(std::move(*call));
    } else {
      content.Text(text.substr(pos, end - pos), false);  // not a call: stays text
    }
    pos = end;
  }
}

// Llama 3.x: the whole reply is one or more call objects (joined by ';'), maybe after
// <|python_tag|>.
std::optional<std::vector<ToolCall>> Llama3Calls(std::string_view text) {
  text = TrimLeft(text);
  if (text.substr(0, kPythonTag.size()) == kPythonTag)
    text = TrimLeft(text.substr(kPythonTag.size()));
  std::vector<ToolCall> calls;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] != '{') return std::nullopt;
    const size_t end = JsonValueEnd(text, pos);
    if (end == std::string_view::npos) return std::nullopt;
    auto call = CallFromJson(ParseJson(text.substr(pos, end - pos)));
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    pos = end;
    while (pos < text.size() && (IsSpace(text[pos]) || text[pos] == ';')) ++pos;
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// Generic: {"tool_calls": [...]}, {"tool_call": {...}} or a bare call object.
std::optional<std::vector<ToolCall>> GenericCalls(std::string_view text) {
  const json value = ParseJson(TrimLeft(TrimRight(text)));
  if (!value.is_object()) return std::nullopt;
  if (auto list = value.find("tool_calls"); list != value.end()) return CallsFromArray(*list);
  if (auto one = value.find("tool_call"); one != value.end()) {
    if (auto call = CallFromJson(*one)) return std::vector<ToolCall>{std::move(*call)};
    return std::nullopt;
  }
  if (auto call = CallFromJson(value)) return std::vector<ToolCall>{std::move(*call)};
  return std::nullopt;
}

// Formats where the calls are the whole reply: a reply that may still become one (it starts
// with one of `starts`, or with a prefix of one) is held until its end.
template <typename Reader>
ParsedToolCalls ParseWholeReply(std::string_view text, bool final,
                                std::initializer_list<std::string_view> starts, Reader read) {
  const std::string_view lead = TrimLeft(text);
  bool may_be_call = false;
  for (std::string_view start : starts) {
    const size_t n = std::min(lead.size(), start.size());
    if (lead.substr(0, n) == start.substr(0, n)) may_be_call = true;
  }
  if (!may_be_call) return AllContent(text, true);
  if (!final) return AllContent(text, false);
  ParsedToolCalls result;
  if (auto calls = read(text)) {
    result.calls = std::move(*calls);
  } else {
    result.content = std::string(text);
  }
  return result;
}

// Mistral after [TOOL_CALLS] at `pos`: a JSON array of calls, or name[CALL_ID]id[ARGS]{…}.
// Returns where the calls end, or npos when the text ends first; `calls` empty when malformed.
size_t MistralCallsAt(std::string_view text, size_t pos, std::vector<ToolCall>* calls) {
  calls->clear();
  size_t start = pos;
  while (start < text.size() && IsSpace(text[start])) ++start;
  if (start >= text.size()) return std::string_view::npos;
  if (text[start] == '[') {
    const size_t end = JsonValueEnd(text, start);
    if (end == std::string_view::npos) return end;
    if (auto parsed = CallsFromArray(ParseJson(text.substr(start, end - start)))) {
      *calls = std::move(*parsed);
    }
    return end;
  }
  const size_t args = text.find(kMistralArgs, start);
  if (args == std::string_view::npos) {
    // No [ARGS] yet: malformed once a newline or another marker shows it is not a name.
    const std::string_view rest = text.substr(start);
    const size_t stop = rest.find_first_of("\n{");
    return stop == std::string_view::npos ? std::string_view::npos : start + stop;
  }
  std::string_view name = text.substr(start, args - start);
  ToolCall call;
  if (const size_t id = name.find(kMistralCallId); id != std::string_view::npos) {
    call.id = std::string(name.substr(id + kMistralCallId.size()));
    name = name.substr(0, id);
  }
  size_t value = args + kMistralArgs.size();
  while (value < text.size() && IsSpace(text[value])) ++value;
  const size_t end = JsonValueEnd(text, value);
  if (end == std::string_view::npos) return end;
  call.name = std::string(TrimRight(name));
  const bool plain_name =
      !call.name.empty() && call.name.find_first_of(" \n\t\"{}[]") == std::string::npos;
  auto arguments = ArgumentsText(ParseJson(text.substr(value, end - value)));
  if (plain_name && arguments) {
    call.arguments = *arguments;
    calls->push_back(std::move(call));
  }
  return end;
}

ParsedToolCalls ParseMistral(std::string_view text, bool final) {
  if (text.find(kMistralCalls) == std::string_view::npos) {
    // The marker is a control token that decoding may leave out: a bare array of calls. A reply
    // that starts with '[' may be either, so it is held until its end.
    const std::string_view lead = TrimLeft(text);
    if (!final && (lead.empty() || lead[0] == '[')) return AllContent(text, false);
    if (final && !lead.empty() && lead[0] == '[') {
      if (auto calls = CallsFromArray(ParseJson(TrimRight(lead)))) {
        ParsedToolCalls result;
        result.calls = std::move(*calls);
        return result;
      }
    }
  }
  ParsedToolCalls result;
  ContentBuilder content(&result);
  size_t pos = 0;
  for (;;) {
    const size_t open = text.find(kMistralCalls, pos);
    if (open == std::string_view::npos) {
      std::string_view tail = text.substr(pos);
      if (final) {
        content.Text(tail, false);
      } else {
        const size_t held_from = text.size() - MarkerPrefixAtEnd(tail, kMistralCalls);
        const std::string_view kept = TrimRight(text.substr(pos, held_from - pos));
        content.Text(kept, false);
        result.held = text.size() - (pos + kept.size());
      }
      return result;
    }
    std::vector<ToolCall> calls;
    size_t end = MistralCallsAt(text, open + kMistralCalls.size(), &calls);
    if (end == std::string_view::npos) {
      if (!final) {
        const std::string_view kept = TrimRight(text.substr(pos, open - pos));
        content.Text(kept, false);
        result.held = text.size() - (pos + kept.size());
        return result;
      }
      end = text.size();
    }
    if (!calls.empty()) {
      content.Text(text.substr(pos, open - pos), true);
      for (ToolCall& call : calls) content.Call(std::move(call));
    } else {
      content.Text(text.substr(pos, end - pos), false);
    }
    pos = end;
  }
}

bool Contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

}  // namespace

ToolCallFormat DetectToolCallFormat(std::string_view chat_template) {
  if (TemplateUsesHarmony(chat_template)) return ToolCallFormat::kHarmony;
  if (Contains(chat_template, "<tool_call>")) return ToolCallFormat::kHermes;
  if (Contains(chat_template, "[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  if (Contains(chat_template, "<|python_tag|>") ||
      (Contains(chat_template, "<|start_header_id|>") &&
       Contains(chat_template, "\"parameters\": "))) {
    return ToolCallFormat::kLlama3;
  }
  return ToolCallFormat::kGeneric;
}

std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name) {
  for (ToolCallFormat format :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3, ToolCallFormat::kMistral,
        ToolCallFormat::kGeneric, ToolCallFormat::kHarmony}) {
    if (name == ToolCallFormatName(format)) return format;
  }
  return std::nullopt;
}

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3:
      return "llama3";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kGeneric:
      return "generic";
    case ToolCallFormat::kHarmony:
      return "harmony";
  }
  return "generic";
}

ParsedToolCalls ParseToolCalls(ToolCallFormat format, std::string_view text, bool final,
                               const HarmonyOptions& harmony) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseHermes(text, final);
    case ToolCallFormat::kLlama3:
      return ParseWholeReply(text, final, {"{", kPythonTag}, Llama3Calls);
    case ToolCallFormat::kMistral:
      return ParseMistral(text, final);
    case ToolCallFormat::kGeneric:
      return ParseWholeReply(text, final, {"{"}, GenericCalls);
    case ToolCallFormat::kHarmony:
      return ParseHarmony(text, final, harmony);
  }
  return AllContent(text, final);
}

ToolCallStream::Delta ToolCallStream::Diff(const ParsedToolCalls& parsed) {
  Delta delta;
  if (parsed.content.size() > content_sent_) {
    delta.content = parsed.content.substr(content_sent_);
    content_sent_ = parsed.content.size();
  }
  if (parsed.reasoning.size() > reasoning_sent_) {
    delta.reasoning = parsed.reasoning.substr(reasoning_sent_);
    reasoning_sent_ = parsed.reasoning.size();
  }
  delta.first_call_index = calls_sent_;
  for (size_t i = calls_sent_; i < parsed.calls.size(); ++i) {
    delta.calls.push_back(parsed.calls[i]);
  }
  calls_sent_ = std::max(calls_sent_, parsed.calls.size());
  return delta;
}

ToolCallStream::Delta ToolCallStream::Push(std::string_view text) {
  text_.append(text);
  return Diff(ParseToolCalls(format_, text_, /*final=*/false, harmony_));
}

ToolCallStream::Delta ToolCallStream::Finish() {
  return Diff(ParseToolCalls(format_, text_, /*final=*/true, harmony_));
}

std::string NewToolCallId() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 random(std::random_device{}());
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[random() % (sizeof(kAlphabet) - 1)];
  return id;
}

}  // namespace petrel::server
