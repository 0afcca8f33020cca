// ParseHarmony: one pass over the reply's messages, each routed by its header.
#include "server/harmony.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace petrel::server {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kFunctions = "functions.";
// What ends a body: <|start|> too, for a model that left out <|end|> (it is not consumed).
constexpr std::string_view kBodyEnds[] = {"<|end|>", "<|call|>", "<|return|>", kStart};
// How a reply's first header (continuing the prompt's "<|start|>assistant") may begin.
constexpr std::string_view kFirstHeaderStarts[] = {kChannel, "<|constrain|>", kMessage,
                                                   " to=", "to="};

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

bool AllSpace(std::string_view s) { return std::all_of(s.begin(), s.end(), IsSpace); }

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// Whether `s` is a proper prefix of `marker` (the next bytes may complete it).
bool MayBecome(std::string_view s, std::string_view marker) {
  return s.size() < marker.size() && marker.substr(0, s.size()) == s;
}

// The length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t MarkerPrefixAtEnd(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (marker.substr(0, n) == text.substr(text.size() - n)) return n;
  }
  return 0;
}

// A header field's value: up to a space or the next marker.
std::string_view Word(std::string_view s) {
  size_t end = 0;
  while (end < s.size() && !IsSpace(s[end]) && s[end] != '<') ++end;
  return s.substr(0, end);
}

struct Header {
  std::string_view role = "assistant";
  std::string_view channel;
  std::string_view recipient;
};

// "assistant to=functions.f<|channel|>commentary json" or "<|channel|>commentary
// to=functions.f <|constrain|>json": the role (when the message had <|start|>), the channel
// and the recipient.
Header ReadHeader(std::string_view text, bool has_role) {
  Header header;
  if (has_role) header.role = Word(text);
  if (size_t channel = text.find(kChannel); channel != std::string_view::npos) {
    header.channel = Word(text.substr(channel + kChannel.size()));
  }
  for (size_t to = text.find("to="); to != std::string_view::npos; to = text.find("to=", to + 1)) {
    if (to == 0 || IsSpace(text[to - 1]) || text[to - 1] == '>') {
      header.recipient = Word(text.substr(to + 3));
      break;
    }
  }
  return header;
}

std::optional<std::string> ArgumentsText(std::string_view body) {
  json value = json::parse(body, nullptr, false);
  if (value.is_string()) value = json::parse(value.get_ref<const std::string&>(), nullptr, false);
  if (!value.is_object()) return std::nullopt;
  return value.dump();
}

// Appends one message's text to a part, a newline between messages.
void AppendPart(std::string* part, std::string_view piece) {
  if (piece.empty()) return;
  if (!part->empty()) *part += '\n';
  part->append(piece);
}

class Parser {
 public:
  Parser(std::string_view text, bool final, const HarmonyOptions& options)
      : text_(text), final_(final), options_(options) {}

  ParsedToolCalls Run() {
    size_t pos = 0;
    bool first = true;
    while (pos < text_.size()) {
      const std::string_view rest = text_.substr(pos);
      // The first header may follow whitespace the model wrote after the prompt's header start.
      size_t lead = pos;
      while (first && lead < text_.size() && IsSpace(text_[lead])) ++lead;
      const std::string_view lead_rest = text_.substr(lead);
      size_t header = std::string_view::npos;
      const bool has_role = StartsWith(rest, kStart);  // a header after <|start|> names its role
      if (has_role) {
        header = pos + kStart.size();
      } else if (first && !lead_rest.empty() && FirstHeader(lead_rest)) {
        header = lead;
      } else if (!final_ && (MayBecome(rest, kStart) ||
                             (first && (lead_rest.empty() || FirstHeaderMayStart(lead_rest))))) {
        return Hold(pos);
      }
      first = false;
      if (header == std::string_view::npos) {
        if (!Stray(&pos)) return out_;
        continue;
      }
      if (!Message(header, has_role, &pos)) return out_;
    }
    return out_;
  }

 private:
  bool FirstHeader(std::string_view rest) const {
    return std::any_of(std::begin(kFirstHeaderStarts), std::end(kFirstHeaderStarts),
                       [&](std::string_view start) { return StartsWith(rest, start); });
  }
  bool FirstHeaderMayStart(std::string_view rest) const {
    return std::any_of(std::begin(kFirstHeaderStarts), std::end(kFirstHeaderStarts),
                       [&](std::string_view start) { return MayBecome(rest, start); });
  }

  ParsedToolCalls Hold(size_t from) {
    out_.held = text_.size() - from;
    return out_;
  }

  // Text outside any message, up to the next <|start|>: content, unless only whitespace.
  // False when the text ended (partial: what may still change is held).
  bool Stray(size_t* pos) {
    const size_t next = text_.find(kStart, *pos);
    std::string_view piece =
        text_.substr(*pos, next == std::string_view::npos ? text_.npos : next - *pos);
    if (next == std::string_view::npos && !final_) {
      if (AllSpace(piece)) {
        Hold(*pos);
        return false;
      }
      const size_t held = MarkerPrefixAtEnd(piece, kStart);
      AppendPart(&out_.content, piece.substr(0, piece.size() - held));
      out_.held = held;
      return false;
    }
    if (!AllSpace(piece)) AppendPart(&out_.content, piece);
    if (next == std::string_view::npos) return false;
    *pos = next;
    return true;
  }

  // One message whose header starts at `header`. False when the text ended.
  bool Message(size_t header, bool has_role, size_t* pos) {
    const size_t message = text_.find(kMessage, header);
    const size_t restart = text_.find(kStart, header);
    if (restart != std::string_view::npos &&
        (message == std::string_view::npos || restart < message)) {
      *pos = restart;  // a header that never reached its body: dropped
      return true;
    }
    if (message == std::string_view::npos) {
      if (!final_) Hold(*pos);
      return false;  // final: a header cut off before its body says nothing
    }
    const Header fields = ReadHeader(text_.substr(header, message - header), has_role);
    const size_t body = message + kMessage.size();
    size_t end = std::string_view::npos, next = text_.size();
    for (std::string_view marker : kBodyEnds) {
      const size_t at = text_.find(marker, body);
      if (at < end) {
        end = at;
        next = marker == kStart ? at : at + marker.size();
      }
    }
    const bool open = end == std::string_view::npos;
    if (open) end = text_.size();
    std::string_view text = text_.substr(body, end - body);
    if (open && !final_) {
      size_t held = 0;
      for (std::string_view marker : kBodyEnds) {
        held = std::max(held, MarkerPrefixAtEnd(text, marker));
      }
      text.remove_suffix(held);
      if (Route(fields, text, /*whole=*/false)) {
        out_.held = held;
      } else {
        Hold(*pos);
      }
      return false;
    }
    Route(fields, text, /*whole=*/true);
    *pos = next;
    return true;
  }

  // Puts a body where its header says. A call's body is only read `whole`; false when a
  // partial body is held back for that.
  bool Route(const Header& header, std::string_view body, bool whole) {
    if (header.role != "assistant") return true;
    if (!header.recipient.empty() && header.recipient != "assistant" &&
        header.recipient != "user" && header.recipient != "all") {
      if (!StartsWith(header.recipient, kFunctions)) return true;
      if (options_.calls) {
        if (!whole) return false;
        const std::string_view name = header.recipient.substr(kFunctions.size());
        if (auto arguments = ArgumentsText(body); arguments && !name.empty()) {
          out_.calls.push_back({"", std::string(name), std::move(*arguments)});
        } else {
          AppendPart(&out_.content, body);  // not a call: its text stays
        }
        return true;
      }
    }
    if (header.channel == "analysis" && !options_.analysis_to_content) {
      AppendPart(&out_.reasoning, body);
    } else {
      AppendPart(&out_.content, body);
    }
    return true;
  }

  std::string_view text_;
  bool final_;
  HarmonyOptions options_;
  ParsedToolCalls out_;
};

}  // namespace

ParsedToolCalls ParseHarmony(std::string_view text, bool final, const HarmonyOptions& options) {
  return Parser(text, final, options).Run();
}

bool TemplateUsesHarmony(std::string_view chat_template) {
  return chat_template.find(kChannel) != std::string_view::npos &&
         chat_template.find(kMessage) != std::string_view::npos;
}

}  // namespace petrel::server
