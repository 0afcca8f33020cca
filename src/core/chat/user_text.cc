// User text marking: ChooseMarkers, SpecialTexts, MarkSpecialTexts, TakeMarkedSpans.
#include "core/chat/user_text.h"

#include <algorithm>
#include <bitset>
#include <cstdio>
#include <random>

namespace petrel {
namespace {

// U+FDD0 and U+FDD1: noncharacters, which no tokenizer has a token for and no template writes.
constexpr const char* kOpen = "\xEF\xB7\x90";
constexpr const char* kClose = "\xEF\xB7\x91";

struct Range {
  size_t begin, end;
};

bool MarkString(std::string* text, const std::vector<std::string>& specials,
                const std::bitset<256>& first_bytes, const UserTextMarkers& markers) {
  if (std::none_of(text->begin(), text->end(),
                   [&](char c) { return first_bytes[static_cast<unsigned char>(c)]; })) {
    return false;
  }
  std::vector<Range> hits;
  for (const std::string& special : specials) {
    for (size_t at = text->find(special); at != std::string::npos;
         at = text->find(special, at + 1)) {
      hits.push_back({at, at + special.size()});
    }
  }
  if (hits.empty()) return false;
  std::sort(hits.begin(), hits.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  std::vector<Range> merged;
  for (const Range& hit : hits) {
    if (!merged.empty() && hit.begin < merged.back().end) {
      merged.back().end = std::max(merged.back().end, hit.end);
    } else {
      merged.push_back(hit);
    }
  }
  std::string out;
  size_t copied = 0;
  for (const Range& range : merged) {
    out.append(*text, copied, range.begin - copied);
    out += markers.open;
    out.append(*text, range.begin, range.end - range.begin);
    out += markers.close;
    copied = range.end;
  }
  out.append(*text, copied);
  *text = std::move(out);
  return true;
}

bool MarkValue(nlohmann::ordered_json* value, const std::vector<std::string>& specials,
               const std::bitset<256>& first_bytes, const UserTextMarkers& markers) {
  bool marked = false;
  if (value->is_string()) {
    marked = MarkString(value->get_ptr<std::string*>(), specials, first_bytes, markers);
  } else if (value->is_array() || value->is_object()) {
    for (auto& item : *value) marked = MarkValue(&item, specials, first_bytes, markers) || marked;
  }
  return marked;
}

}  // namespace

UserTextMarkers ChooseMarkers(const std::vector<const nlohmann::ordered_json*>& inputs) {
  std::string all;
  for (const nlohmann::ordered_json* input : inputs) {
    all += input->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  std::random_device device;
  std::mt19937_64 rng((uint64_t(device()) << 32) ^ device());
  UserTextMarkers markers;
  do {
    char digits[17];
    std::snprintf(digits, sizeof(digits), "%016llx", (unsigned long long)rng());
    markers.open = std::string(kOpen) + digits + kOpen;
    markers.close = std::string(kClose) + digits + kClose;
  } while (all.find(markers.open) != std::string::npos ||
           all.find(markers.close) != std::string::npos);
  return markers;
}

std::vector<std::string> SpecialTexts(const Tokenizer& tokenizer) {
  std::vector<std::string> texts;
  for (size_t id = 0; id < tokenizer.n_vocab(); ++id) {
    if (!tokenizer.IsSpecial(int32_t(id))) continue;
    const std::string_view text = tokenizer.TokenText(int32_t(id));
    if (!text.empty()) texts.emplace_back(text);
  }
  return texts;
}

bool MarkSpecialTexts(nlohmann::ordered_json* value, const std::vector<std::string>& specials,
                      const UserTextMarkers& markers) {
  std::bitset<256> first_bytes;
  for (const std::string& special : specials)
    first_bytes.set(static_cast<unsigned char>(special[0]));
  return MarkValue(value, specials, first_bytes, markers);
}

std::vector<TextSpan> TakeMarkedSpans(std::string* text, const UserTextMarkers& markers) {
  std::vector<TextSpan> spans;
  std::string out;
  out.reserve(text->size());
  bool inside = false;
  for (size_t pos = 0; pos < text->size();) {
    if (text->compare(pos, markers.open.size(), markers.open) == 0) {
      if (!inside) spans.push_back({out.size(), out.size()});
      inside = true;
      pos += markers.open.size();
    } else if (text->compare(pos, markers.close.size(), markers.close) == 0) {
      if (inside) spans.back().end = out.size();
      inside = false;
      pos += markers.close.size();
    } else {
      out.push_back((*text)[pos++]);
    }
  }
  if (inside) spans.back().end = out.size();
  std::erase_if(spans, [](const TextSpan& span) { return span.begin == span.end; });
  *text = std::move(out);
  return spans;
}

}  // namespace petrel
