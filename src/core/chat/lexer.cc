// Template lexer (see lexer.h). Mirrors jinja2.lexer: the earliest `{{`, `{%` or `{#` opens a
// tag; `-`/`+` after the opener or before the closer control whitespace; inside tags, a closer is
// only recognised while brackets are balanced.
#include "core/chat/lexer.h"

#include <cstdio>
#include <cstring>
#include <optional>

#include "core/chat/py_str.h"

namespace petrel::chat {
namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsTagSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  Result<std::vector<Token>> Run();

 private:
  Status Fail(size_t offset, const std::string& message) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < offset && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        column = 1;
      } else if ((uint8_t(src_[i]) & 0xC0) != 0x80) {
        ++column;
      }
    }
    return Error("%d:%d: %s", line, column, message.c_str());
  }
  Token MakeToken(TokenKind kind, size_t offset, std::string text = {});
  void EmitText(std::string text, size_t offset);
  // Length of Python whitespace (`\s`) starting at `pos`.
  size_t SpaceRun(size_t pos) const;
  // Handles `{% raw %}` at `start` if it is one, emitting `text` (the text before it, whitespace
  // control applied) first; returns false otherwise.
  Result<bool> TryRaw(size_t start, std::string* text);
  Status LexTag(size_t start, bool is_block);
  Status LexString(size_t* pos);
  Status LexNumber(size_t* pos);

  std::string src_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  // Offsets of line starts, for positions.
  std::vector<size_t> line_starts_;
};

Token Lexer::MakeToken(TokenKind kind, size_t offset, std::string text) {
  Token token;
  token.kind = kind;
  token.text = std::move(text);
  size_t lo = 0, hi = line_starts_.size();
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    if (line_starts_[mid] <= offset) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  token.line = int(lo + 1);
  token.column = int(offset - line_starts_[lo] + 1);
  return token;
}

void Lexer::EmitText(std::string text, size_t offset) {
  if (text.empty()) return;
  tokens_.push_back(MakeToken(TokenKind::kText, offset, std::move(text)));
}

size_t Lexer::SpaceRun(size_t pos) const {
  size_t end = pos;
  while (end < src_.size()) {
    if (IsTagSpace(src_[end]) || (src_[end] >= 0x1C && src_[end] <= 0x1F)) {
      ++end;
      continue;
    }
    if (uint8_t(src_[end]) < 0x80) break;
    // A non-ASCII code point: decode just it.
    size_t len = 1;
    while (end + len < src_.size() && len < 4 && (uint8_t(src_[end + len]) & 0xC0) == 0x80) ++len;
    const std::u32string cp = DecodeUtf8(std::string_view(src_).substr(end, len));
    if (cp.size() != 1 || !IsPySpace(cp[0])) break;
    end += len;
  }
  return end - pos;
}

Result<bool> Lexer::TryRaw(size_t start, std::string* text) {
  size_t p = start + 2;
  if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
  while (p < src_.size() && IsTagSpace(src_[p])) ++p;
  if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && IsNameChar(src_[p + 3]))) {
    return false;
  }
  p += 3;
  while (p < src_.size() && IsTagSpace(src_[p])) ++p;
  bool strip_after_begin = false;
  if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) strip_after_begin = src_[p++] == '-';
  if (src_.compare(p, 2, "%}") != 0) return false;
  p += 2;
  // Find `{%[-+]? endraw [-+]?%}`.
  size_t search = p;
  while (true) {
    const size_t open = src_.find("{%", search);
    if (open == std::string::npos) return Fail(start, "missing end of raw directive");
    size_t q = open + 2;
    const bool strip_content_end = q < src_.size() && src_[q] == '-';
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
    while (q < src_.size() && IsTagSpace(src_[q])) ++q;
    if (src_.compare(q, 6, "endraw") != 0) {
      search = open + 2;
      continue;
    }
    q += 6;
    while (q < src_.size() && IsTagSpace(src_[q])) ++q;
    char sign = 0;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
    if (src_.compare(q, 2, "%}") != 0) {
      search = open + 2;
      continue;
    }
    q += 2;
    EmitText(std::move(*text), start);
    std::string content = src_.substr(p, open - p);
    if (strip_after_begin) content = PyStrip(content, std::nullopt, true, false);
    if (strip_content_end) content = PyStrip(content, std::nullopt, false, true);
    EmitText(std::move(content), p);
    if (sign == '-') {
      q += SpaceRun(q);
    } else if (sign == 0 && q < src_.size() && src_[q] == '\n') {
      ++q;
    }
    line_starting_ = q > 0 && src_[q - 1] == '\n';
    pos_ = q;
    return true;
  }
}

Status Lexer::LexString(size_t* pos) {
  const size_t start = *pos;
  const char quote = src_[start];
  std::string value;
  size_t p = start + 1;
  while (true) {
    if (p >= src_.size()) return Fail(start, "unterminated string");
    const char c = src_[p];
    if (c == quote) break;
    if (c != '\\') {
      value += c;
      ++p;
      continue;
    }
    if (p + 1 >= src_.size()) return Fail(start, "unterminated string");
    const char e = src_[p + 1];
    p += 2;
    auto hex = [&](int digits) -> std::optional<char32_t> {
      if (p + size_t(digits) > src_.size()) return std::nullopt;
      char32_t cp = 0;
      for (int i = 0; i < digits; ++i) {
        const char h = src_[p + size_t(i)];
        const int v = IsDigit(h)               ? h - '0'
                      : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                      : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                               : -1;
        if (v < 0) return std::nullopt;
        cp = cp * 16 + char32_t(v);
      }
      p += size_t(digits);
      return cp;
    };
    switch (e) {
      case '\n':
        break;
      case '\\':
        value += '\\';
        break;
      case '\'':
        value += '\'';
        break;
      case '"':
        value += '"';
        break;
      case 'a':
        value += '\a';
        break;
      case 'b':
        value += '\b';
        break;
      case 'f':
        value += '\f';
        break;
      case 'n':
        value += '\n';
        break;
      case 'r':
        value += '\r';
        break;
      case 't':
        value += '\t';
        break;
      case 'v':
        value += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const auto cp = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
        if (!cp || *cp > 0x10FFFF) return Fail(p, "invalid escape in string");
        AppendUtf8(*cp, &value);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = char32_t(e - '0');
          for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i) {
            cp = cp * 8 + char32_t(src_[p++] - '0');
          }
          AppendUtf8(cp, &value);
        } else {
          value += '\\';
          value += e;
        }
    }
  }
  tokens_.push_back(MakeToken(TokenKind::kString, start, std::move(value)));
  *pos = p + 1;
  return Status::Ok();
}

Status Lexer::LexNumber(size_t* pos) {
  const size_t start = *pos;
  size_t p = start;
  auto digits = [&](auto is_digit) {
    const size_t begin = p;
    while (p < src_.size() && (is_digit(src_[p]) || (src_[p] == '_' && p > begin &&
                                                     p + 1 < src_.size() && is_digit(src_[p + 1]))))
      ++p;
    return p > begin;
  };
  std::string clean;
  auto take = [&](size_t from) {
    for (size_t i = from; i < p; ++i) {
      if (src_[i] != '_') clean += src_[i];
    }
  };
  if (src_[p] == '0' && p + 1 < src_.size() && strchr("xXoObB", src_[p + 1]) && src_[p + 1]) {
    const char kind = char(src_[p + 1] | 0x20);
    const int base = kind == 'x' ? 16 : kind == 'o' ? 8 : 2;
    p += 2;
    const size_t begin = p;
    auto is_digit = [base](char c) {
      if (base == 16) return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      return c >= '0' && c < char('0' + base);
    };
    if (!digits(is_digit)) return Fail(start, "invalid number literal");
    take(begin);
    errno = 0;
    const unsigned long long v = std::strtoull(clean.c_str(), nullptr, base);
    if (errno || v > uint64_t(INT64_MAX)) return Fail(start, "integer literal too large");
    Token token = MakeToken(TokenKind::kInt, start);
    token.int_value = int64_t(v);
    tokens_.push_back(std::move(token));
    *pos = p;
    return Status::Ok();
  }
  digits(IsDigit);
  bool is_float = false;
  // `x.0.1` is attribute access, not a float: jinja's float rule has `(?<!\.)`.
  const bool after_dot = start > 0 && src_[start - 1] == '.';
  if (!after_dot && p + 1 < src_.size() && src_[p] == '.' && IsDigit(src_[p + 1])) {
    ++p;
    digits(IsDigit);
    is_float = true;
  }
  if (!after_dot && p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
    size_t q = p + 1;
    if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
    if (q < src_.size() && IsDigit(src_[q])) {
      p = q;
      digits(IsDigit);
      is_float = true;
    }
  }
  take(start);
  Token token = MakeToken(is_float ? TokenKind::kFloat : TokenKind::kInt, start, clean);
  if (is_float) {
    token.float_value = std::strtod(clean.c_str(), nullptr);
  } else {
    errno = 0;
    const unsigned long long v = std::strtoull(clean.c_str(), nullptr, 10);
    if (errno || v > uint64_t(INT64_MAX)) return Fail(start, "integer literal too large");
    token.int_value = int64_t(v);
  }
  tokens_.push_back(std::move(token));
  *pos = p;
  return Status::Ok();
}

Status Lexer::LexTag(size_t start, bool is_block) {
  tokens_.push_back(MakeToken(is_block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, start));
  size_t p = start + 2;
  if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
  const char closer = is_block ? '%' : '}';
  std::string brackets;
  while (true) {
    while (p < src_.size() && IsTagSpace(src_[p])) ++p;
    if (p >= src_.size()) {
      return Fail(start, is_block ? "unexpected end of template: unclosed '{%'"
                                  : "unexpected end of template: unclosed '{{'");
    }
    if (brackets.empty()) {
      size_t end = p;
      char sign = 0;
      if ((src_[end] == '-' || (is_block && src_[end] == '+')) && end + 1 < src_.size()) {
        sign = src_[end++];
      }
      if (end + 1 < src_.size() && src_[end] == closer && src_[end + 1] == '}') {
        tokens_.push_back(MakeToken(is_block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, p));
        end += 2;
        if (sign == '-') {
          end += SpaceRun(end);
        } else if (is_block && sign == 0 && end < src_.size() && src_[end] == '\n') {
          ++end;  // trim_blocks
        }
        line_starting_ = src_[end - 1] == '\n';
        pos_ = end;
        return Status::Ok();
      }
    }
    const char c = src_[p];
    if (IsNameStart(c)) {
      const size_t begin = p;
      while (p < src_.size() && IsNameChar(src_[p])) ++p;
      tokens_.push_back(MakeToken(TokenKind::kName, begin, src_.substr(begin, p - begin)));
    } else if (IsDigit(c)) {
      PETREL_RETURN_IF_ERROR(LexNumber(&p));
    } else if (c == '\'' || c == '"') {
      PETREL_RETURN_IF_ERROR(LexString(&p));
    } else {
      static const char* const kTwoCharOps[] = {"//", "**", "==", "!=", ">=", "<="};
      std::string op;
      for (const char* two : kTwoCharOps) {
        if (src_.compare(p, 2, two) == 0) op = two;
      }
      if (op.empty()) {
        if (!strchr("+-/*%~[](){}<>=.:|,;", c) || c == 0) {
          return Fail(p, std::string("unexpected character '") + c + "'");
        }
        op = std::string(1, c);
      }
      if (op == "(" || op == "[" || op == "{") {
        if (brackets.size() >= 256) return Fail(p, "brackets nested too deeply");
        brackets += c;
      } else if (op == ")" || op == "]" || op == "}") {
        const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
        if (brackets.empty() || brackets.back() != open) {
          return Fail(p, "unexpected '" + op + "'");
        }
        brackets.pop_back();
      }
      tokens_.push_back(MakeToken(TokenKind::kOp, p, op));
      p += op.size();
    }
  }
}

Result<std::vector<Token>> Lexer::Run() {
  line_starts_.push_back(0);
  for (size_t i = 0; i < src_.size(); ++i) {
    if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }
  while (pos_ < src_.size()) {
    size_t start = pos_;
    while (true) {
      start = src_.find('{', start);
      if (start == std::string::npos || start + 1 >= src_.size()) {
        start = std::string::npos;
        break;
      }
      const char next = src_[start + 1];
      if (next == '{' || next == '%' || next == '#') break;
      ++start;
    }
    if (start == std::string::npos) {
      EmitText(src_.substr(pos_), pos_);
      break;
    }
    std::string text = src_.substr(pos_, start - pos_);
    const char kind = src_[start + 1];
    const char sign = start + 2 < src_.size() ? src_[start + 2] : 0;
    if (sign == '-') {
      text = PyStrip(text, std::nullopt, false, true);
    } else if (sign != '+' && kind != '{') {
      // lstrip_blocks: drop spaces and tabs between the line start and a block or comment.
      const size_t line_begin = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if (line_begin > 0 || line_starting_) {
        const size_t run = SpaceRun(pos_ + line_begin);
        if (run > 0 && line_begin + run == text.size()) text.resize(line_begin);
      }
    }
    if (kind == '%') {
      PETREL_ASSIGN_OR_RETURN(const bool was_raw, TryRaw(start, &text));
      if (was_raw) continue;
    }
    EmitText(std::move(text), pos_);
    if (kind == '#') {
      const size_t close = src_.find("#}", start + 2);
      if (close == std::string::npos) return Fail(start, "unclosed comment");
      size_t end = close + 2;
      const char end_sign = close > start + 2 ? src_[close - 1] : 0;
      if (end_sign == '-') {
        end += SpaceRun(end);
      } else if (end_sign != '+' && end < src_.size() && src_[end] == '\n') {
        ++end;
      }
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      continue;
    }
    PETREL_RETURN_IF_ERROR(LexTag(start, kind == '%'));
  }
  tokens_.push_back(MakeToken(TokenKind::kEof, src_.size()));
  return std::move(tokens_);
}

}  // namespace

Result<std::vector<Token>> Lex(std::string_view source) {
  // Jinja normalises every newline sequence to "\n" and drops one trailing newline.
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(std::move(normalized)).Run();
}

}  // namespace petrel::chat
