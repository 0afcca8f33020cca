// Integer ranges as digit patterns and regular expressions as GBNF, for the schema converter.
#include "core/grammar/json_schema_rules.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace petrel {
namespace {

constexpr int64_t kMaxBound = 1000000000000000000;  // 10^18

std::string Join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += separator;
    out += parts[i];
  }
  return out;
}

// "(" text ")", appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) about
// "(" + std::string.
std::string Parenthesized(const std::string& text) {
  std::string out = "(";
  out += text;
  out += ')';
  return out;
}

std::string DigitClass(char first, char last) {
  if (first == last) return std::string("\"") + first + "\"";
  return std::string("[") + first + "-" + last + "]";
}

// Numbers of equal length from digit string `low` to `high` (leading zeros allowed inside).
std::string SameLength(const std::string& low, const std::string& high) {
  const size_t n = low.size();
  if (n == 1) return DigitClass(low[0], high[0]);
  const std::string low_rest = low.substr(1), high_rest = high.substr(1);
  if (low[0] == high[0]) return DigitClass(low[0], low[0]) + " " + SameLength(low_rest, high_rest);
  const bool low_all_zero = low_rest.find_first_not_of('0') == std::string::npos;
  const bool high_all_nine = high_rest.find_first_not_of('9') == std::string::npos;
  const std::string any_rest = "[0-9]{" + std::to_string(n - 1) + "}";
  if (low_all_zero && high_all_nine) return DigitClass(low[0], high[0]) + " " + any_rest;
  std::vector<std::string> parts;
  char middle_first = char(low[0] + 1), middle_last = char(high[0] - 1);
  if (low_all_zero) {
    middle_first = low[0];
  } else {
    parts.push_back(DigitClass(low[0], low[0]) + " (" +
                    SameLength(low_rest, std::string(n - 1, '9')) + ")");
  }
  if (high_all_nine) middle_last = high[0];
  if (middle_first <= middle_last)
    parts.push_back(DigitClass(middle_first, middle_last) + " " + any_rest);
  if (!high_all_nine) {
    parts.push_back(DigitClass(high[0], high[0]) + " (" +
                    SameLength(std::string(n - 1, '0'), high_rest) + ")");
  }
  return Parenthesized(Join(parts, " | "));
}

// Non-negative integers in [low, high] (high absent: unbounded), without leading zeros.
std::string NonNegativeRange(uint64_t low, std::optional<uint64_t> high) {
  const std::string low_text = std::to_string(low);
  const size_t low_len = low_text.size();
  const size_t high_len = high ? std::to_string(*high).size() : low_len;
  std::vector<std::string> parts;
  for (size_t len = low_len; len <= high_len; ++len) {
    std::string first = low_text;
    if (len != low_len) {
      first.assign(len, '0');  // 10^(len - 1)
      first[0] = '1';
    }
    const std::string last =
        high && len == high_len ? std::to_string(*high) : std::string(len, '9');
    parts.push_back(SameLength(first, last));
  }
  // Unbounded: every longer number.
  if (!high) {
    std::string longer = "[1-9] [0-9]{";
    longer += std::to_string(low_len);
    longer += ",}";
    parts.push_back(longer);
  }
  return parts.size() == 1 ? parts[0] : Parenthesized(Join(parts, " | "));
}

}  // namespace

Result<std::string> IntegerRangeGbnf(std::optional<int64_t> min, std::optional<int64_t> max) {
  if ((min && (*min < -kMaxBound || *min > kMaxBound)) ||
      (max && (*max < -kMaxBound || *max > kMaxBound))) {
    return Error("integer bounds beyond +-10^18 are not supported");
  }
  if (min && max && *min > *max)
    return Error("minimum %lld exceeds maximum %lld", (long long)*min, (long long)*max);
  std::vector<std::string> parts;
  // Negative values x in [min, min(max, -1)], as "-" and the magnitude -x.
  if (!min || *min < 0) {
    const uint64_t magnitude_low = max && *max < 0 ? uint64_t(-*max) : 1;
    std::optional<uint64_t> magnitude_high;
    if (min) magnitude_high = uint64_t(-*min);
    parts.push_back("\"-\" " + NonNegativeRange(magnitude_low, magnitude_high));
  }
  if (!max || *max >= 0) {
    const uint64_t low = min && *min > 0 ? uint64_t(*min) : 0;
    std::optional<uint64_t> high;
    if (max) high = uint64_t(*max);
    parts.push_back(NonNegativeRange(low, high));
  }
  return Parenthesized(Join(parts, " | "));
}

std::string GbnfLiteral(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const uint8_t byte = uint8_t(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (byte < 0x20 || byte == 0x7F) {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\x%02X", byte);
      out += escape;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

std::string HexChar(uint32_t cpt) {
  char text[16];
  if (cpt < 0x100) {
    std::snprintf(text, sizeof text, "\\x%02X", cpt);
  } else if (cpt < 0x10000) {
    std::snprintf(text, sizeof text, "\\u%04X", cpt);
  } else {
    std::snprintf(text, sizeof text, "\\U%08X", cpt);
  }
  return text;
}

// How a character is written inside a JSON string: itself, or its escape.
std::string JsonEncodedLiteral(uint32_t cpt) {
  switch (cpt) {
    case '"':
      return R"("\\\"")";
    case '\\':
      return R"("\\\\")";
    case '\n':
      return R"("\\n")";
    case '\t':
      return R"("\\t")";
    case '\r':
      return R"("\\r")";
    case '\b':
      return R"("\\b")";
    case '\f':
      return R"("\\f")";
    default:
      break;
  }
  if (cpt < 0x20) {
    char text[16];
    std::snprintf(text, sizeof text, "\"\\\\u%04X\"", cpt);
    return text;
  }
  return "[" + HexChar(cpt) + "]";
}

bool NeedsEscape(uint32_t cpt) { return cpt == '"' || cpt == '\\' || cpt < 0x20; }

class RegexConverter {
 public:
  // GBNF for a piece of the pattern, and whether it can match the empty string: GBNF refuses
  // an unbounded repetition of such a piece (its expansion would be left-recursive).
  struct Fragment {
    std::string gbnf;
    bool nullable = false;
  };

  RegexConverter(std::string_view pattern, size_t max_count)
      : text_(pattern), max_count_(max_count) {}

  Result<std::string> Convert() {
    bool anchored_start = false, anchored_end = false;
    if (!text_.empty() && text_.front() == '^') {
      anchored_start = true;
      text_.remove_prefix(1);
    }
    if (!text_.empty() && text_.back() == '$' &&
        (text_.size() < 2 || text_[text_.size() - 2] != '\\')) {
      anchored_end = true;
      text_.remove_suffix(1);
    }
    PETREL_ASSIGN_OR_RETURN(Fragment body, Alternation(0));
    if (pos_ != text_.size()) return Fail("unexpected ')'");
    std::string out = anchored_start ? "" : "char* ";
    out += Parenthesized(body.gbnf);
    if (!anchored_end) out += " char*";
    return out;
  }

 private:
  Status Fail(const std::string& what) const {
    return ErrorMessage("pattern: " + what + " at offset " + std::to_string(pos_));
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  Result<Fragment> Alternation(size_t depth) {
    if (depth > 64) return Fail("groups nested too deeply");
    std::vector<std::string> alternatives;
    bool nullable = false;
    for (;;) {
      PETREL_ASSIGN_OR_RETURN(Fragment sequence, Sequence(depth));
      alternatives.push_back(sequence.gbnf.empty() ? "\"\"" : sequence.gbnf);
      nullable = nullable || sequence.nullable;
      if (Peek() != '|') break;
      ++pos_;
    }
    if (alternatives.size() == 1) return Fragment{alternatives[0], nullable};
    return Fragment{Parenthesized(Join(alternatives, " | ")), nullable};
  }

  Result<Fragment> Sequence(size_t depth) {
    std::vector<std::string> items;
    bool nullable = true;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      PETREL_ASSIGN_OR_RETURN(Fragment atom, Atom(depth));
      PETREL_ASSIGN_OR_RETURN(Fragment quantified, Quantifier(atom));
      items.push_back(quantified.gbnf);
      nullable = nullable && quantified.nullable;
    }
    return Fragment{Join(items, " "), nullable};
  }

  Result<Fragment> Quantifier(const Fragment& atom) {
    const size_t quantifier_pos = pos_;
    std::string suffix;
    bool unbounded = false;    // *, + or {m,}
    bool may_be_zero = false;  // *, ? or {0...}
    const char ch = Peek();
    if (ch == '*' || ch == '+' || ch == '?') {
      suffix = std::string(1, ch);
      unbounded = ch != '?';
      may_be_zero = ch != '+';
      ++pos_;
    } else if (ch == '{') {
      const size_t start = pos_;
      ++pos_;
      auto number = [&]() -> Result<size_t> {
        size_t value = 0, digits = 0;
        while (Peek() >= '0' && Peek() <= '9') {
          value = value * 10 + size_t(Peek() - '0');
          ++pos_;
          if (++digits > 9 || value > max_count_) return Fail("repetition count too large");
        }
        if (digits == 0) return Fail("expected a number in {m,n}");
        return value;
      };
      PETREL_ASSIGN_OR_RETURN(const size_t min, number());
      may_be_zero = min == 0;
      suffix = "{";
      suffix += std::to_string(min);
      if (Peek() == ',') {
        ++pos_;
        suffix += ",";
        if (Peek() != '}') {
          PETREL_ASSIGN_OR_RETURN(const size_t max, number());
          if (max < min) return Fail("repetition {m,n} with n < m");
          suffix += std::to_string(max);
        } else {
          unbounded = true;  // {m,}
        }
      }
      if (Peek() != '}') {
        pos_ = start;
        return Fail("unterminated '{'");
      }
      ++pos_;
      suffix += "}";
    } else {
      return atom;
    }
    if (Peek() == '?') ++pos_;  // lazy: the same strings match
    if (Peek() == '+') return Fail("possessive quantifiers are not supported");
    if (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{') {
      return Fail("nested quantifier");
    }
    if (unbounded && atom.nullable) {
      pos_ = quantifier_pos;
      return Fail("unbounded repetition of an item that can match the empty string");
    }
    return Fragment{Parenthesized(atom.gbnf) + suffix, may_be_zero || atom.nullable};
  }

  Result<Fragment> Atom(size_t depth) {
    const char ch = Peek();
    if (ch == '(') {
      ++pos_;
      if (Peek() == '?') {
        if (pos_ + 1 < text_.size() && text_[pos_ + 1] == ':') {
          pos_ += 2;
        } else {
          return Fail("lookarounds and named groups are not supported");
        }
      }
      PETREL_ASSIGN_OR_RETURN(Fragment inner, Alternation(depth + 1));
      if (Peek() != ')') return Fail("unclosed '('");
      ++pos_;
      return Fragment{Parenthesized(inner.gbnf), inner.nullable};
    }
    if (ch == '[') {
      PETREL_ASSIGN_OR_RETURN(std::string set, Class());
      return Fragment{set, false};
    }
    if (ch == '.') {
      ++pos_;
      return Fragment{R"([^"\\\x00-\x1F])", false};
    }
    if (ch == '^' || ch == '$') return Fail("anchors are supported only at the ends");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{') return Fail("quantifier without an item");
    Ranges ranges;
    PETREL_ASSIGN_OR_RETURN(const bool is_class, Char(&ranges));
    return Fragment{Encode(ranges, false, is_class), false};
  }

  // One character or shorthand class at pos_ into `ranges`; true if it was a shorthand.
  Result<bool> Char(Ranges* ranges) {
    if (AtEnd()) return Fail("unexpected end");
    if (Peek() != '\\') {
      ranges->emplace_back(DecodeAt(), 0);
      ranges->back().second = ranges->back().first;
      return false;
    }
    ++pos_;
    if (AtEnd()) return Fail("escape at the end");
    const char esc = text_[pos_++];
    switch (esc) {
      case 'd':
        ranges->push_back({'0', '9'});
        return true;
      case 'w':
        ranges->insert(ranges->end(), {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
        return true;
      case 's':
        ranges->insert(ranges->end(), {{' ', ' '}, {'\t', '\r'}});
        return true;
      case 'n':
        ranges->push_back({'\n', '\n'});
        return false;
      case 't':
        ranges->push_back({'\t', '\t'});
        return false;
      case 'r':
        ranges->push_back({'\r', '\r'});
        return false;
      case 'f':
        ranges->push_back({'\f', '\f'});
        return false;
      case 'v':
        ranges->push_back({'\v', '\v'});
        return false;
      case 'u': {
        uint32_t value = 0;
        for (int i = 0; i < 4; ++i) {
          const char digit = Peek();
          if (!std::isxdigit(uint8_t(digit))) return Fail("\\u needs 4 hex digits");
          value = value * 16 +
                  uint32_t(std::isdigit(uint8_t(digit)) ? digit - '0' : (digit | 0x20) - 'a' + 10);
          ++pos_;
        }
        ranges->push_back({value, value});
        return false;
      }
      default:
        if (std::isalnum(uint8_t(esc))) {
          pos_ -= 2;
          return Fail(std::string("escape '\\") + esc + "' is not supported");
        }
        ranges->push_back({uint32_t(uint8_t(esc)), uint32_t(uint8_t(esc))});
        return false;
    }
  }

  uint32_t DecodeAt() {
    const uint8_t lead = uint8_t(text_[pos_]);
    size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    uint32_t cpt = length == 1 ? lead : lead & (0x7F >> length);
    for (size_t i = 1; i < length && pos_ + i < text_.size(); ++i) {
      cpt = (cpt << 6) | (uint8_t(text_[pos_ + i]) & 0x3F);
    }
    pos_ = std::min(text_.size(), pos_ + length);
    return cpt;
  }

  Result<std::string> Class() {
    const size_t start = pos_;
    ++pos_;
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges ranges;
    bool first = true;
    while (AtEnd() || Peek() != ']' || first) {
      if (AtEnd()) {
        pos_ = start;
        return Fail("unterminated '['");
      }
      if (Peek() == ']' && first) break;  // "[]" matches nothing; handled below
      first = false;
      Ranges item;
      PETREL_ASSIGN_OR_RETURN(const bool shorthand, Char(&item));
      if (!shorthand && Peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
        ++pos_;
        Ranges last;
        PETREL_ASSIGN_OR_RETURN(const bool last_shorthand, Char(&last));
        if (last_shorthand || last[0].first < item[0].first) return Fail("bad range in class");
        item[0].second = last[0].first;
      }
      ranges.insert(ranges.end(), item.begin(), item.end());
    }
    ++pos_;
    if (ranges.empty()) return Fail("empty class");
    return Encode(ranges, negated, true);
  }

  // The JSON-encoded forms of the characters in `ranges` (or, negated, of unescaped
  // characters outside them).
  std::string Encode(Ranges ranges, bool negated, bool is_class) {
    if (negated) {
      std::string out = "[^";
      for (const auto& [first, last] : ranges) {
        out += HexChar(first);
        if (last != first) {
          out += '-';
          out += HexChar(last);
        }
      }
      return out + R"("\\\x00-\x1F])";
    }
    std::vector<std::string> parts;
    std::string plain;
    for (const auto& [first, last] : ranges) {
      for (uint32_t cpt = first; cpt <= last && cpt < 0x80; ++cpt) {
        if (NeedsEscape(cpt)) parts.push_back(JsonEncodedLiteral(cpt));
      }
      // The raw ranges, less the characters that must be escaped.
      uint32_t begin = first;
      while (begin <= last) {
        while (begin <= last && NeedsEscape(begin)) ++begin;
        if (begin > last) break;
        // The next character that needs escaping above `begin` is '"' or '\\'.
        const uint32_t next_escape = begin < '"' ? '"' : begin < '\\' ? '\\' : UINT32_MAX;
        const uint32_t end = std::min(last, next_escape - 1);
        plain += HexChar(begin);
        if (end != begin) {
          plain += '-';
          plain += HexChar(end);
        }
        begin = end + 1;
      }
    }
    if (!plain.empty()) parts.insert(parts.begin(), "[" + plain + "]");
    (void)is_class;
    return parts.size() == 1 ? parts[0] : Parenthesized(Join(parts, " | "));
  }

  std::string_view text_;
  size_t max_count_;
  size_t pos_ = 0;
};

}  // namespace

Result<std::string> RegexToGbnf(std::string_view pattern, size_t max_count) {
  return RegexConverter(pattern, max_count).Convert();
}

}  // namespace petrel
