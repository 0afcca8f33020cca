// Expression parsing (part of the parser, see parser.cc). Precedence, loosest first: conditional
// `a if c else b`, `or`, `and`, `not`, comparisons / `in`, `+ -`, `~`, `* / // %`, `**`, unary
// `- +`, then postfix (`.attr`, `[item]`, `(call)`) and filters / tests, as jinja2 orders them.
#include "core/chat/parser_internal.h"

namespace petrel::chat::internal {

Result<ExprPtr> Parser::ParseTuple(bool with_condexpr, bool explicit_parens,
                                   std::string_view extra_end) {
  const Token& at = Peek();
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) PETREL_RETURN_IF_ERROR(ExpectOp(","));
    const Token& token = Peek();
    if (token.kind == TokenKind::kVarEnd || token.kind == TokenKind::kBlockEnd || IsOp(")") ||
        (!extra_end.empty() && IsName(extra_end))) {
      break;
    }
    PETREL_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condexpr));
    items.push_back(std::move(item));
    if (IsOp(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) return Unexpected(Peek(), "an expression");
  }
  ExprPtr tuple = MakeExpr(ExprKind::kTuple, at);
  tuple->children = std::move(items);
  return tuple;
}

Result<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  if (!with_condexpr) return ParseOr();
  PETREL_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  while (IsName("if")) {
    const Token& at = Next();
    ExprPtr cond = MakeExpr(ExprKind::kCond, at);
    PETREL_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    cond->children.push_back(std::move(test));
    cond->children.push_back(std::move(expr));
    ExprPtr otherwise;
    if (SkipName("else")) {
      Nest nest(&depth_);
      if (nest.too_deep()) return Fail(Peek(), "expression nested too deeply");
      PETREL_ASSIGN_OR_RETURN(otherwise, ParseExpression());
    }
    cond->children.push_back(std::move(otherwise));
    expr = std::move(cond);
  }
  return expr;
}

Result<ExprPtr> Parser::ParseOr() {
  PETREL_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    const Token& at = Next();
    PETREL_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    ExprPtr expr = MakeExpr(ExprKind::kOr, at);
    expr->children.push_back(std::move(left));
    expr->children.push_back(std::move(right));
    left = std::move(expr);
  }
  return left;
}

Result<ExprPtr> Parser::ParseAnd() {
  PETREL_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    const Token& at = Next();
    PETREL_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    ExprPtr expr = MakeExpr(ExprKind::kAnd, at);
    expr->children.push_back(std::move(left));
    expr->children.push_back(std::move(right));
    left = std::move(expr);
  }
  return left;
}

Result<ExprPtr> Parser::ParseNot() {
  if (IsName("not")) {
    const Token& at = Next();
    Nest nest(&depth_);
    if (nest.too_deep()) return Fail(at, "expression nested too deeply");
    ExprPtr expr = MakeExpr(ExprKind::kNot, at);
    PETREL_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    expr->children.push_back(std::move(operand));
    return expr;
  }
  return ParseCompare();
}

Result<ExprPtr> Parser::ParseCompare() {
  const Token& at = Peek();
  PETREL_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  ExprPtr compare;
  while (true) {
    std::string op;
    const Token& token = Peek();
    if (token.kind == TokenKind::kOp &&
        (token.text == "==" || token.text == "!=" || token.text == "<" || token.text == "<=" ||
         token.text == ">" || token.text == ">=")) {
      op = token.text;
      Next();
    } else if (IsName("in")) {
      op = "in";
      Next();
    } else if (IsName("not") && IsName("in", 1)) {
      op = "notin";
      Next();
      Next();
    } else {
      break;
    }
    if (!compare) {
      compare = MakeExpr(ExprKind::kCompare, at);
      compare->children.push_back(std::move(first));
    }
    PETREL_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    compare->ops.push_back(std::move(op));
    compare->children.push_back(std::move(operand));
  }
  return compare ? std::move(compare) : std::move(first);
}

Result<ExprPtr> Parser::ParseMath1() {
  PETREL_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    const Token& at = Next();
    PETREL_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    PETREL_ASSIGN_OR_RETURN(
        left, Binary(at.text == "+" ? "+" : "-", std::move(left), std::move(right), at));
  }
  return left;
}

Result<ExprPtr> Parser::ParseConcat() {
  PETREL_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
  while (IsOp("~")) {
    const Token& at = Next();
    PETREL_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
    PETREL_ASSIGN_OR_RETURN(left, Binary("~", std::move(left), std::move(right), at));
  }
  return left;
}

Result<ExprPtr> Parser::ParseMath2() {
  PETREL_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    const Token& at = Next();
    static const char* const kOps[] = {"*", "/", "//", "%"};
    const char* op = *std::find_if(std::begin(kOps), std::end(kOps),
                                   [&](const char* o) { return at.text == o; });
    PETREL_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    PETREL_ASSIGN_OR_RETURN(left, Binary(op, std::move(left), std::move(right), at));
  }
  return left;
}

Result<ExprPtr> Parser::ParsePow() {
  PETREL_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (IsOp("**")) {
    const Token& at = Next();
    PETREL_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    PETREL_ASSIGN_OR_RETURN(left, Binary("**", std::move(left), std::move(right), at));
  }
  return left;
}

Result<ExprPtr> Parser::ParseUnary(bool with_filter) {
  Nest nest(&depth_);
  if (nest.too_deep()) return Fail(Peek(), "expression nested too deeply");
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    const Token& at = Next();
    node = MakeExpr(ExprKind::kUnary, at);
    node->name = at.text;
    PETREL_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    node->children.push_back(std::move(operand));
  } else {
    PETREL_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  PETREL_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    PETREL_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  return node;
}

Result<ExprPtr> Parser::ParsePrimary() {
  const Token& token = Peek();
  switch (token.kind) {
    case TokenKind::kName: {
      Next();
      ExprPtr expr = MakeExpr(ExprKind::kLiteral, token);
      if (token.text == "true" || token.text == "True") {
        expr->literal = Value(true);
      } else if (token.text == "false" || token.text == "False") {
        expr->literal = Value(false);
      } else if (token.text == "none" || token.text == "None") {
        expr->literal = Value::None();
      } else {
        expr->kind = ExprKind::kName;
        expr->name = token.text;
        if (!usage_.empty()) {
          if (token.text == "caller") usage_.back().caller = true;
          if (token.text == "varargs") usage_.back().varargs = true;
          if (token.text == "kwargs") usage_.back().kwargs = true;
        }
      }
      return expr;
    }
    case TokenKind::kString: {
      std::string text = Next().text;
      while (Peek().kind == TokenKind::kString) text += Next().text;
      ExprPtr expr = MakeExpr(ExprKind::kLiteral, token);
      expr->literal = Value(std::move(text));
      return expr;
    }
    case TokenKind::kInt:
    case TokenKind::kFloat: {
      Next();
      ExprPtr expr = MakeExpr(ExprKind::kLiteral, token);
      expr->literal =
          token.kind == TokenKind::kInt ? Value(token.int_value) : Value(token.float_value);
      return expr;
    }
    case TokenKind::kOp:
      if (token.text == "(") {
        Next();
        PETREL_ASSIGN_OR_RETURN(ExprPtr expr, ParseTuple(true, true));
        PETREL_RETURN_IF_ERROR(ExpectOp(")"));
        return expr;
      }
      if (token.text == "[" || token.text == "{") {
        const bool is_dict = token.text == "{";
        const char* close = is_dict ? "}" : "]";
        Next();
        ExprPtr expr = MakeExpr(is_dict ? ExprKind::kDict : ExprKind::kList, token);
        while (!SkipOp(close)) {
          if (!expr->children.empty()) {
            PETREL_RETURN_IF_ERROR(ExpectOp(","));
            if (SkipOp(close)) break;
          }
          PETREL_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
          expr->children.push_back(std::move(item));
          if (is_dict) {
            PETREL_RETURN_IF_ERROR(ExpectOp(":"));
            PETREL_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
            expr->children.push_back(std::move(value));
          }
        }
        return expr;
      }
      break;
    case TokenKind::kText:
    case TokenKind::kVarBegin:
    case TokenKind::kVarEnd:
    case TokenKind::kBlockBegin:
    case TokenKind::kBlockEnd:
    case TokenKind::kEof:
      break;
  }
  return Unexpected(token);
}

Result<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    const Token& at = Peek();
    if (SkipOp(".")) {
      if (Peek().kind == TokenKind::kName) {
        ExprPtr expr = MakeExpr(ExprKind::kGetAttr, at);
        expr->name = Next().text;
        expr->children.push_back(std::move(node));
        node = std::move(expr);
      } else if (Peek().kind == TokenKind::kInt) {
        ExprPtr expr = MakeExpr(ExprKind::kGetItem, at);
        ExprPtr index = MakeExpr(ExprKind::kLiteral, Peek());
        index->literal = Value(Next().int_value);
        expr->children.push_back(std::move(node));
        expr->children.push_back(std::move(index));
        node = std::move(expr);
      } else {
        return Unexpected(Peek(), "an attribute name");
      }
    } else if (SkipOp("[")) {
      Nest nest(&depth_);
      if (nest.too_deep()) return Fail(at, "expression nested too deeply");
      std::vector<ExprPtr> parts;  // start, stop, step
      bool is_slice = false;
      for (int part = 0; part < 3; ++part) {
        if (part > 0) {
          if (!SkipOp(":")) break;
          is_slice = true;
        }
        if (IsOp(":") || IsOp("]")) {
          parts.emplace_back();
        } else {
          PETREL_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
          parts.push_back(std::move(item));
        }
      }
      PETREL_RETURN_IF_ERROR(ExpectOp("]"));
      ExprPtr expr = MakeExpr(is_slice ? ExprKind::kSlice : ExprKind::kGetItem, at);
      expr->children.push_back(std::move(node));
      if (!is_slice && !parts[0]) return Unexpected(at, "a subscript");
      for (auto& part : parts) expr->children.push_back(std::move(part));
      while (is_slice && expr->children.size() < 4) expr->children.emplace_back();
      node = std::move(expr);
    } else if (IsOp("(")) {
      ExprPtr call = MakeExpr(ExprKind::kCall, at);
      call->children.push_back(std::move(node));
      PETREL_RETURN_IF_ERROR(ParseCallArgs(call.get()));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

Status Parser::ParseCallArgs(Expr* call) {
  Nest nest(&depth_);
  if (nest.too_deep()) return Fail(Peek(), "expression nested too deeply");
  PETREL_RETURN_IF_ERROR(ExpectOp("("));
  bool first = true;
  while (!SkipOp(")")) {
    if (!first) {
      PETREL_RETURN_IF_ERROR(ExpectOp(","));
      if (SkipOp(")")) break;
    }
    first = false;
    if (IsOp("*") || IsOp("**")) return Fail(Peek(), "*args and **kwargs are not supported");
    if (Peek().kind == TokenKind::kName && IsOp("=", 1)) {
      std::string key = Next().text;
      Next();
      PETREL_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call->kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      if (!call->kwargs.empty()) return Fail(Peek(), "positional argument after keyword argument");
      PETREL_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call->children.push_back(std::move(value));
    }
  }
  return Status::Ok();
}

Result<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (SkipOp("|")) {
      PETREL_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
    } else if (IsName("is")) {
      Next();
      PETREL_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      ExprPtr call = MakeExpr(ExprKind::kCall, Peek());
      call->children.push_back(std::move(node));
      PETREL_RETURN_IF_ERROR(ParseCallArgs(call.get()));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::ParseFilter(ExprPtr subject) {
  const Token& at = Peek();
  ExprPtr filter = MakeExpr(ExprKind::kFilter, at);
  PETREL_ASSIGN_OR_RETURN(filter->name, ExpectName());
  while (SkipOp(".")) {
    PETREL_ASSIGN_OR_RETURN(std::string part, ExpectName());
    filter->name += "." + part;
  }
  filter->children.push_back(std::move(subject));
  if (IsOp("(")) PETREL_RETURN_IF_ERROR(ParseCallArgs(filter.get()));
  return filter;
}

Result<ExprPtr> Parser::ParseTest(ExprPtr subject) {
  const Token& at = Peek();
  ExprPtr test = MakeExpr(ExprKind::kTest, at);
  test->negated = SkipName("not");
  PETREL_ASSIGN_OR_RETURN(test->name, ExpectName());
  while (SkipOp(".")) {
    PETREL_ASSIGN_OR_RETURN(std::string part, ExpectName());
    test->name += "." + part;
  }
  test->children.push_back(std::move(subject));
  const Token& next = Peek();
  if (IsOp("(")) {
    PETREL_RETURN_IF_ERROR(ParseCallArgs(test.get()));
  } else if ((next.kind == TokenKind::kName || next.kind == TokenKind::kString ||
              next.kind == TokenKind::kInt || next.kind == TokenKind::kFloat || IsOp("[") ||
              IsOp("{")) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Fail(next, "you cannot chain multiple tests with is");
    PETREL_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    PETREL_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    test->children.push_back(std::move(arg));
  }
  return test;
}

}  // namespace petrel::chat::internal
