// The GBNF parser: `name ::= alternatives` rules, literals, character classes, groups,
// repetitions and comments, parsed by recursive descent whose depth the nesting limit bounds.
// Repetitions become helper rules here, so the matcher only knows characters and references.
#include <cstring>

#include "core/grammar/grammar_draft.h"

namespace petrel::grammar_internal {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

bool IsNameChar(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '-' || ch == '_';
}

// Decodes one UTF-8 character of valid text (ValidateUtf8 ran first).
uint32_t DecodeValid(std::string_view text, size_t* pos) {
  const auto byte = [&](size_t i) { return uint32_t(uint8_t(text[i])); };
  const uint32_t lead = byte(*pos);
  if (lead < 0x80) {
    *pos += 1;
    return lead;
  }
  if (lead < 0xE0) {
    const uint32_t cpt = ((lead & 0x1F) << 6) | (byte(*pos + 1) & 0x3F);
    *pos += 2;
    return cpt;
  }
  if (lead < 0xF0) {
    const uint32_t cpt =
        ((lead & 0x0F) << 12) | ((byte(*pos + 1) & 0x3F) << 6) | (byte(*pos + 2) & 0x3F);
    *pos += 3;
    return cpt;
  }
  const uint32_t cpt = ((lead & 0x07) << 18) | ((byte(*pos + 1) & 0x3F) << 12) |
                       ((byte(*pos + 2) & 0x3F) << 6) | (byte(*pos + 3) & 0x3F);
  *pos += 4;
  return cpt;
}

// Position of the first byte that does not start a valid, shortest-form UTF-8 character, or
// npos.
size_t FindInvalidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const uint8_t lead = uint8_t(text[pos]);
    size_t length = 0;
    uint32_t min = 0;
    if (lead < 0x80) {
      ++pos;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2, min = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, min = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4, min = 0x10000;
    } else {
      return pos;
    }
    if (pos + length > text.size()) return pos;
    uint32_t cpt = lead & (0x7F >> length);
    for (size_t i = 1; i < length; ++i) {
      const uint8_t next = uint8_t(text[pos + i]);
      if ((next & 0xC0) != 0x80) return pos;
      cpt = (cpt << 6) | (next & 0x3F);
    }
    if (cpt < min || cpt > kMaxCodepoint || (cpt >= 0xD800 && cpt <= 0xDFFF)) return pos;
    pos += length;
  }
  return std::string_view::npos;
}

class GbnfParser {
 public:
  GbnfParser(std::string_view text, const GrammarLimits& limits, GrammarDraft* draft)
      : text_(text), limits_(limits), draft_(*draft) {}

  Status Parse() {
    if (text_.size() > limits_.max_source_bytes) {
      return Error("grammar of %zu bytes exceeds the limit of %zu", text_.size(),
                   limits_.max_source_bytes);
    }
    if (const size_t bad = FindInvalidUtf8(text_); bad != std::string_view::npos) {
      return ErrorAt(bad, "invalid UTF-8");
    }
    for (;;) {
      SkipSpace();
      if (AtEnd()) break;
      PETREL_RETURN_IF_ERROR(ParseRule());
    }
    return Status::Ok();
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  std::string Where(size_t pos) const { return TextPosition(text_, pos); }
  Status ErrorAt(size_t pos, const std::string& message) const {
    return ErrorMessage(Where(pos) + ": " + message);
  }

  // Whitespace, newlines and `#` comments.
  void SkipSpace() {
    while (!AtEnd()) {
      const char ch = Peek();
      if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
        ++pos_;
      } else if (ch == '#') {
        while (!AtEnd() && Peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // Whether a new rule (`name ::=`) starts at the current position.
  bool AtRuleStart() const {
    size_t i = pos_;
    while (i < text_.size() && IsNameChar(text_[i])) ++i;
    if (i == pos_) return false;
    while (i < text_.size() && (text_[i] == ' ' || text_[i] == '\t')) ++i;
    return text_.compare(i, 3, "::=") == 0;
  }

  std::string ParseName() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  Result<uint32_t> RuleId(const std::string& name, size_t pos) {
    auto it = draft_.ids.find(name);
    if (it != draft_.ids.end()) return it->second;
    PETREL_RETURN_IF_ERROR(CheckRuleCount(pos));
    const uint32_t id = uint32_t(draft_.rules.size());
    draft_.rules.push_back(RuleDraft{name, {}, false, pos});
    draft_.ids.emplace(name, id);
    return id;
  }

  Status CheckRuleCount(size_t pos) const {
    if (draft_.rules.size() >= limits_.max_rules) {
      return ErrorAt(pos, "more than " + std::to_string(limits_.max_rules) + " rules");
    }
    return Status::Ok();
  }

  Result<uint32_t> NewHelper(size_t pos) {
    PETREL_RETURN_IF_ERROR(CheckRuleCount(pos));
    const uint32_t id = uint32_t(draft_.rules.size());
    draft_.rules.push_back(
        RuleDraft{current_rule_ + "/" + std::to_string(++helpers_), {}, true, pos});
    return id;
  }

  Status AddElements(size_t count, size_t pos) {
    draft_.n_elements += count;
    if (draft_.n_elements > limits_.max_elements) {
      return ErrorAt(pos, "grammar expands to more than " + std::to_string(limits_.max_elements) +
                              " elements");
    }
    return Status::Ok();
  }

  uint32_t ClassId(CharClass cls) {
    // Literals repeat the same few characters; share their classes.
    for (size_t i = draft_.classes.size(); i-- > 0 && draft_.classes.size() - i <= 64;) {
      if (draft_.classes[i] == cls) return uint32_t(i);
    }
    draft_.classes.push_back(std::move(cls));
    return uint32_t(draft_.classes.size() - 1);
  }

  Status ParseRule() {
    const size_t start = pos_;
    const std::string name = ParseName();
    if (name.empty()) return ErrorAt(start, "expected a rule name");
    while (Peek() == ' ' || Peek() == '\t') ++pos_;
    if (text_.compare(pos_, 3, "::=") != 0)
      return ErrorAt(pos_, "expected '::=' after '" + name + "'");
    pos_ += 3;
    PETREL_ASSIGN_OR_RETURN(const uint32_t id, RuleId(name, start));
    if (draft_.rules[id].defined) {
      return ErrorAt(start, "rule '" + name + "' is defined twice");
    }
    draft_.rules[id].defined = true;
    draft_.rules[id].first_seen = start;
    current_rule_ = name;
    helpers_ = 0;
    std::vector<std::vector<GrammarElement>> alternatives;
    PETREL_RETURN_IF_ERROR(ParseAlternatives(0, &alternatives));
    draft_.rules[id].alternatives = std::move(alternatives);
    SkipSpace();
    if (!AtEnd() && !AtRuleStart()) {
      return ErrorAt(pos_, std::string("unexpected '") + Peek() + "'");
    }
    return Status::Ok();
  }

  Status ParseAlternatives(size_t depth, std::vector<std::vector<GrammarElement>>* out) {
    for (;;) {
      std::vector<GrammarElement> sequence;
      PETREL_RETURN_IF_ERROR(ParseSequence(depth, &sequence));
      PETREL_RETURN_IF_ERROR(AddElements(1, pos_));  // its end marker
      out->push_back(std::move(sequence));
      SkipSpace();
      if (Peek() != '|') return Status::Ok();
      ++pos_;
    }
  }

  Status ParseSequence(size_t depth, std::vector<GrammarElement>* out) {
    for (;;) {
      SkipSpace();
      if (AtEnd() || Peek() == '|' || Peek() == ')') return Status::Ok();
      if (depth == 0 && AtRuleStart()) return Status::Ok();
      const size_t item_start = out->size();
      const size_t start = pos_;
      PETREL_RETURN_IF_ERROR(ParseItem(depth, out));
      // Postfix operators apply to the item just parsed.
      for (;;) {
        const char op = Peek();
        if (op != '*' && op != '+' && op != '?' && op != '{') break;
        PETREL_RETURN_IF_ERROR(ParseRepetition(start, item_start, out));
      }
    }
  }

  Status ParseItem(size_t depth, std::vector<GrammarElement>* out) {
    const size_t start = pos_;
    const char ch = Peek();
    if (ch == '"') return ParseLiteral(out);
    if (ch == '[') return ParseClass(out);
    if (ch == '.') {
      ++pos_;
      PETREL_RETURN_IF_ERROR(AddElements(1, start));
      out->push_back({ElementKind::kChars, ClassId(CharClass({}, /*negated=*/true))});
      return Status::Ok();
    }
    if (ch == '(') {
      if (depth + 1 > limits_.max_nesting) {
        return ErrorAt(start, "groups nested deeper than " + std::to_string(limits_.max_nesting));
      }
      ++pos_;
      PETREL_ASSIGN_OR_RETURN(const uint32_t helper, NewHelper(start));
      std::vector<std::vector<GrammarElement>> alternatives;
      PETREL_RETURN_IF_ERROR(ParseAlternatives(depth + 1, &alternatives));
      SkipSpace();
      if (Peek() != ')') return ErrorAt(start, "unclosed '('");
      ++pos_;
      draft_.rules[helper].alternatives = std::move(alternatives);
      PETREL_RETURN_IF_ERROR(AddElements(1, start));
      out->push_back({ElementKind::kRuleRef, helper});
      return Status::Ok();
    }
    if (IsNameChar(ch)) {
      const std::string name = ParseName();
      PETREL_ASSIGN_OR_RETURN(const uint32_t id, RuleId(name, start));
      PETREL_RETURN_IF_ERROR(AddElements(1, start));
      out->push_back({ElementKind::kRuleRef, id});
      return Status::Ok();
    }
    if (ch == '<') return ErrorAt(start, "token references (<...>) are not supported");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{') {
      return ErrorAt(start, std::string("'") + ch + "' must follow an item");
    }
    return ErrorAt(start, std::string("unexpected '") + ch + "'");
  }

  // One character of a literal or class at pos_, with its escapes.
  Result<uint32_t> ParseChar() {
    const size_t start = pos_;
    if (Peek() != '\\') return DecodeValid(text_, &pos_);
    ++pos_;
    if (AtEnd()) return ErrorAt(start, "escape at the end of the grammar");
    const char esc = Peek();
    ++pos_;
    size_t hex_digits = 0;
    switch (esc) {
      case 'n':
        return uint32_t('\n');
      case 't':
        return uint32_t('\t');
      case 'r':
        return uint32_t('\r');
      case '0':
        return uint32_t(0);
      case '\\':
      case '"':
      case '\'':
      case '[':
      case ']':
      case '-':
      case '/':
      case '^':
        return uint32_t(uint8_t(esc));
      case 'x':
        hex_digits = 2;
        break;
      case 'u':
        hex_digits = 4;
        break;
      case 'U':
        hex_digits = 8;
        break;
      default:
        return ErrorAt(start, std::string("unknown escape '\\") + esc + "'");
    }
    uint64_t value = 0;
    for (size_t i = 0; i < hex_digits; ++i) {
      const char digit = Peek();
      int nibble = -1;
      if (digit >= '0' && digit <= '9') nibble = digit - '0';
      if (digit >= 'a' && digit <= 'f') nibble = digit - 'a' + 10;
      if (digit >= 'A' && digit <= 'F') nibble = digit - 'A' + 10;
      if (nibble < 0) {
        return ErrorAt(start, "escape needs " + std::to_string(hex_digits) + " hex digits");
      }
      value = value * 16 + uint64_t(nibble);
      ++pos_;
    }
    if (value > kMaxCodepoint || (value >= 0xD800 && value <= 0xDFFF)) {
      return ErrorAt(start, "escape is not a Unicode code point");
    }
    return uint32_t(value);
  }

  Status ParseLiteral(std::vector<GrammarElement>* out) {
    const size_t start = pos_;
    ++pos_;  // the opening quote
    for (;;) {
      if (AtEnd() || Peek() == '\n') return ErrorAt(start, "unterminated literal");
      if (Peek() == '"') break;
      PETREL_ASSIGN_OR_RETURN(const uint32_t cpt, ParseChar());
      PETREL_RETURN_IF_ERROR(AddElements(1, start));
      out->push_back({ElementKind::kChars, ClassId(CharClass({{cpt, cpt}}, false))});
    }
    ++pos_;
    return Status::Ok();
  }

  Status ParseClass(std::vector<GrammarElement>* out) {
    const size_t start = pos_;
    ++pos_;  // '['
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    for (;;) {
      if (AtEnd() || Peek() == '\n') return ErrorAt(start, "unterminated character class");
      if (Peek() == ']') break;
      PETREL_ASSIGN_OR_RETURN(const uint32_t first, ParseChar());
      uint32_t last = first;
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < text_.size()) {
        ++pos_;
        const size_t range_pos = pos_;
        PETREL_ASSIGN_OR_RETURN(last, ParseChar());
        if (last < first) return ErrorAt(range_pos, "character range ends before it starts");
      }
      ranges.emplace_back(first, last);
    }
    ++pos_;
    PETREL_RETURN_IF_ERROR(AddElements(1, start));
    out->push_back({ElementKind::kChars, ClassId(CharClass(std::move(ranges), negated))});
    return Status::Ok();
  }

  Result<size_t> ParseCount(size_t op_pos) {
    const size_t start = pos_;
    uint64_t value = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      value = value * 10 + uint64_t(Peek() - '0');
      ++pos_;
      if (value > limits_.max_repetition) {
        return ErrorAt(op_pos, "repetition count exceeds the limit of " +
                                   std::to_string(limits_.max_repetition));
      }
    }
    if (pos_ == start) return ErrorAt(pos_, "expected a number in '{m,n}'");
    return size_t(value);
  }

  // Applies `*`, `+`, `?` or `{m,n}` at pos_ to the item out[item_start..], replacing it with
  // m copies and then either a star rule (S ::= x S | ) or n - m nested optional rules
  // (O1 ::= x | ;  Ok ::= x O(k-1) | ), as llama.cpp expands them.
  Status ParseRepetition(size_t item_pos, size_t item_start, std::vector<GrammarElement>* out) {
    const size_t op_pos = pos_;
    size_t min = 0, max = 0;
    bool unbounded = false;
    const char op = Peek();
    ++pos_;
    if (op == '*') {
      unbounded = true;
    } else if (op == '+') {
      min = 1, unbounded = true;
    } else if (op == '?') {
      max = 1;
    } else {
      SkipSpace();
      PETREL_ASSIGN_OR_RETURN(min, ParseCount(op_pos));
      SkipSpace();
      max = min;
      if (Peek() == ',') {
        ++pos_;
        SkipSpace();
        if (Peek() == '}') {
          unbounded = true;
        } else {
          PETREL_ASSIGN_OR_RETURN(max, ParseCount(op_pos));
        }
        SkipSpace();
      }
      if (Peek() != '}') return ErrorAt(op_pos, "expected '}' to close '{'");
      ++pos_;
      if (!unbounded && max < min) return ErrorAt(op_pos, "repetition {m,n} has n < m");
    }
    std::vector<GrammarElement> item(out->begin() + long(item_start), out->end());
    out->resize(item_start);
    draft_.n_elements -= item.size();
    if (item.size() != 1) {
      // A multi-character literal: one helper rule, so that copies are one reference each.
      PETREL_ASSIGN_OR_RETURN(const uint32_t helper, NewHelper(item_pos));
      PETREL_RETURN_IF_ERROR(AddElements(item.size() + 1, item_pos));
      draft_.rules[helper].alternatives.push_back(std::move(item));
      item = {{ElementKind::kRuleRef, helper}};
    }
    PETREL_RETURN_IF_ERROR(AddElements(min, op_pos));
    for (size_t i = 0; i < min; ++i) out->push_back(item[0]);
    if (unbounded) {
      PETREL_ASSIGN_OR_RETURN(const uint32_t star, NewHelper(op_pos));
      PETREL_RETURN_IF_ERROR(AddElements(5, op_pos));
      draft_.rules[star].alternatives = {{item[0], {ElementKind::kRuleRef, star}}, {}};
      out->push_back({ElementKind::kRuleRef, star});
    } else if (max > min) {
      uint32_t previous = 0;
      for (size_t k = 1; k <= max - min; ++k) {
        PETREL_ASSIGN_OR_RETURN(const uint32_t optional, NewHelper(op_pos));
        PETREL_RETURN_IF_ERROR(AddElements(4, op_pos));
        std::vector<GrammarElement> first = {item[0]};
        if (k > 1) first.push_back({ElementKind::kRuleRef, previous});
        draft_.rules[optional].alternatives = {std::move(first), {}};
        previous = optional;
      }
      PETREL_RETURN_IF_ERROR(AddElements(1, op_pos));
      out->push_back({ElementKind::kRuleRef, previous});
    }
    return Status::Ok();
  }

  std::string_view text_;
  const GrammarLimits& limits_;
  GrammarDraft& draft_;
  size_t pos_ = 0;
  std::string current_rule_;
  size_t helpers_ = 0;
};

}  // namespace

std::string TextPosition(std::string_view text, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else if ((uint8_t(text[i]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

Status ParseGbnf(std::string_view text, const GrammarLimits& limits, GrammarDraft* draft) {
  return GbnfParser(text, limits, draft).Parse();
}

}  // namespace petrel::grammar_internal
