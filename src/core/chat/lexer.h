// Splits template source into text and tag tokens the way jinja2's lexer does with
// trim_blocks and lstrip_blocks on, keep_trailing_newline off.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace petrel::chat {

enum class TokenKind : uint8_t {
  kText,        // literal template text, whitespace control already applied
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifiers and keywords (`if`, `and`, `true`, ...)
  kString,      // text holds the unescaped value
  kInt,
  kFloat,
  kOp,  // text holds the operator: "+", "//", "==", "(", ...
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;
  int column = 1;
};

// Errors read "line:column: message".
Result<std::vector<Token>> Lex(std::string_view source);

}  // namespace petrel::chat
