// Recursive-descent parser from lexer tokens to the syntax tree, following jinja2.parser's
// grammar and operator precedence. Nesting is bounded so hostile input cannot exhaust the stack.
#pragma once

#include <vector>

#include "core/chat/ast.h"
#include "core/chat/lexer.h"
#include "core/base/status.h"

namespace petrel::chat {

// Deepest nesting of statements and of expressions (brackets, unary operators) accepted.
inline constexpr int kMaxParseNesting = 200;

// Errors read "line:column: message".
Result<NodeList> Parse(std::vector<Token> tokens);

}  // namespace petrel::chat
