// Template parser (see parser.h). Precedence, loosest first: conditional `a if c else b`, `or`,
// `and`, `not`, comparisons / `in`, `+ -`, `~`, `* / // %`, `**`, unary `- +`, then postfix
// (`.attr`, `[item]`, `(call)`) and filters / tests, exactly as jinja2 orders them.
#include "core/chat/parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

namespace petrel::chat {
namespace {

struct Usage {
  bool caller = false;
  bool varargs = false;
  bool kwargs = false;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<NodeList> Run() {
    std::string matched;
    PETREL_ASSIGN_OR_RETURN(NodeList body, ParseBody({}, &matched));
    return body;
  }

 private:
  // RAII nesting counter.
  class Nest {
   public:
    explicit Nest(int* depth) : depth_(depth) { ++*depth_; }
    ~Nest() { --*depth_; }
    bool too_deep() const { return *depth_ > kMaxParseNesting; }

   private:
    int* depth_;
  };

  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kOp && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kName && Peek(ahead).text == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  Status Fail(const Token& at, const std::string& message) const {
    return Error("%d:%d: %s", at.line, at.column, message.c_str());
  }
  static std::string Describe(const Token& token) {
    switch (token.kind) {
      case TokenKind::kText:
        return "template text";
      case TokenKind::kVarBegin:
        return "'{{'";
      case TokenKind::kVarEnd:
        return "end of print statement '}}'";
      case TokenKind::kBlockBegin:
        return "'{%'";
      case TokenKind::kBlockEnd:
        return "end of statement block '%}'";
      case TokenKind::kEof:
        return "end of template";
      case TokenKind::kString:
        return "string";
      case TokenKind::kInt:
      case TokenKind::kFloat:
        return "number";
      case TokenKind::kName:
      case TokenKind::kOp:
        return "'" + token.text + "'";
    }
    return "token";
  }
  Status Unexpected(const Token& token, const char* wanted = nullptr) const {
    std::string message = "unexpected " + Describe(token);
    if (wanted) message += std::string(", expected ") + wanted;
    return Fail(token, message);
  }
  Status ExpectOp(std::string_view op) {
    if (SkipOp(op)) return Status::Ok();
    return Unexpected(Peek(), ("'" + std::string(op) + "'").c_str());
  }
  Status ExpectBlockEnd() {
    if (Peek().kind == TokenKind::kBlockEnd) {
      Next();
      return Status::Ok();
    }
    return Unexpected(Peek(), "end of statement block");
  }
  Result<std::string> ExpectName() {
    if (Peek().kind != TokenKind::kName) return Unexpected(Peek(), "a name");
    return Next().text;
  }
  ExprPtr MakeExpr(ExprKind kind, const Token& at) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->line = at.line;
    expr->column = at.column;
    return expr;
  }
  NodePtr MakeNode(NodeKind kind, const Token& at) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->line = at.line;
    node->column = at.column;
    return node;
  }

  Result<NodeList> ParseBody(std::initializer_list<std::string_view> end_tags,
                             std::string* matched);
  Result<NodePtr> ParseStatement();
  Result<NodePtr> ParseIf(const Token& at);
  Result<NodePtr> ParseFor(const Token& at);
  Result<NodePtr> ParseSet(const Token& at);
  Result<NodePtr> ParseMacro(const Token& at, bool is_call_block);
  Result<NodePtr> ParseFilterBlock(const Token& at);
  Result<NodePtr> ParseWith(const Token& at);
  Result<NodePtr> ParseSimpleBody(NodeKind kind, const Token& at, std::string_view end_tag);
  Result<std::vector<std::string>> ParseAssignTargets(std::string_view end_name);
  Status ParseParams(Node* node);

  // Expressions.
  Result<ExprPtr> ParseTuple(bool with_condexpr, bool explicit_parens,
                             std::string_view extra_end = {});
  Result<ExprPtr> ParseExpression(bool with_condexpr = true);
  Result<ExprPtr> ParseOr();
  Result<ExprPtr> ParseAnd();
  Result<ExprPtr> ParseNot();
  Result<ExprPtr> ParseCompare();
  Result<ExprPtr> ParseMath1();
  Result<ExprPtr> ParseConcat();
  Result<ExprPtr> ParseMath2();
  Result<ExprPtr> ParsePow();
  Result<ExprPtr> ParseUnary(bool with_filter);
  Result<ExprPtr> ParsePrimary();
  Result<ExprPtr> ParsePostfix(ExprPtr node);
  Result<ExprPtr> ParseFilterExpr(ExprPtr node);
  Result<ExprPtr> ParseFilter(ExprPtr subject);
  Result<ExprPtr> ParseTest(ExprPtr subject);
  Status ParseCallArgs(Expr* call);
  Result<ExprPtr> Binary(const char* op, ExprPtr left, ExprPtr right, const Token& at) {
    ExprPtr expr = MakeExpr(ExprKind::kBinary, at);
    expr->name = op;
    expr->children.push_back(std::move(left));
    expr->children.push_back(std::move(right));
    return expr;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<Usage> usage_;  // one per macro being parsed
};

Result<NodeList> Parser::ParseBody(std::initializer_list<std::string_view> end_tags,
                                   std::string* matched) {
  Nest nest(&depth_);
  if (nest.too_deep()) return Fail(Peek(), "statements nested too deeply");
  NodeList body;
  while (true) {
    const Token& token = Peek();
    switch (token.kind) {
      case TokenKind::kText: {
        NodePtr node = MakeNode(NodeKind::kText, token);
        node->text = Next().text;
        body.push_back(std::move(node));
        break;
      }
      case TokenKind::kVarBegin: {
        Next();
        NodePtr node = MakeNode(NodeKind::kEmit, token);
        PETREL_ASSIGN_OR_RETURN(node->expr, ParseTuple(true, false));
        if (Peek().kind != TokenKind::kVarEnd) return Unexpected(Peek(), "end of print statement");
        Next();
        body.push_back(std::move(node));
        break;
      }
      case TokenKind::kBlockBegin: {
        const Token& name = Peek(1);
        if (name.kind != TokenKind::kName) return Fail(name, "tag name expected");
        for (std::string_view end : end_tags) {
          if (name.text == end) {
            Next();
            *matched = Next().text;
            return body;
          }
        }
        Next();
        PETREL_ASSIGN_OR_RETURN(NodePtr node, ParseStatement());
        if (node) body.push_back(std::move(node));
        break;
      }
      case TokenKind::kEof: {
        if (end_tags.size() == 0) return body;
        std::string wanted;
        for (std::string_view end : end_tags) {
          if (!wanted.empty()) wanted += " or ";
          wanted += "'" + std::string(end) + "'";
        }
        return Fail(token, "unexpected end of template, expected " + wanted);
      }
      default:
        return Unexpected(token);
    }
  }
}

Result<NodePtr> Parser::ParseStatement() {
  const Token& at = Peek();
  const std::string tag = Next().text;
  if (tag == "if") return ParseIf(at);
  if (tag == "for") return ParseFor(at);
  if (tag == "set") return ParseSet(at);
  if (tag == "macro") return ParseMacro(at, false);
  if (tag == "call") return ParseMacro(at, true);
  if (tag == "filter") return ParseFilterBlock(at);
  if (tag == "with") return ParseWith(at);
  if (tag == "generation") {
    PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
    return ParseSimpleBody(NodeKind::kBody, at, "endgeneration");
  }
  if (tag == "block") {
    PETREL_RETURN_IF_ERROR(ExpectName().status());
    while (SkipName("scoped") || SkipName("required")) {
    }
    PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
    PETREL_ASSIGN_OR_RETURN(NodePtr node, ParseSimpleBody(NodeKind::kBody, at, "endblock"));
    return node;
  }
  if (tag == "print") {
    NodePtr node = MakeNode(NodeKind::kEmit, at);
    PETREL_ASSIGN_OR_RETURN(node->expr, ParseTuple(true, false));
    PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) return Fail(at, "'" + tag + "' outside of a loop");
    PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
    return MakeNode(tag == "break" ? NodeKind::kBreak : NodeKind::kContinue, at);
  }
  return Fail(at, "encountered unknown or unsupported tag '" + tag + "'");
}

Result<NodePtr> Parser::ParseSimpleBody(NodeKind kind, const Token& at, std::string_view end_tag) {
  NodePtr node = MakeNode(kind, at);
  std::string matched;
  PETREL_ASSIGN_OR_RETURN(node->body, ParseBody({end_tag}, &matched));
  if (end_tag == "endblock" && Peek().kind == TokenKind::kName) Next();  // `endblock name`
  PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

Result<NodePtr> Parser::ParseIf(const Token& at) {
  NodePtr node = MakeNode(NodeKind::kIf, at);
  while (true) {
    IfBranch branch;
    PETREL_ASSIGN_OR_RETURN(branch.condition, ParseTuple(false, false));
    PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string matched;
    PETREL_ASSIGN_OR_RETURN(branch.body, ParseBody({"elif", "else", "endif"}, &matched));
    node->branches.push_back(std::move(branch));
    if (matched == "elif") continue;
    if (matched == "else") {
      PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
      IfBranch last;
      PETREL_ASSIGN_OR_RETURN(last.body, ParseBody({"endif"}, &matched));
      node->branches.push_back(std::move(last));
    }
    PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }
}

Result<std::vector<std::string>> Parser::ParseAssignTargets(std::string_view end_name) {
  std::vector<std::string> targets;
  const bool parens = SkipOp("(");
  while (true) {
    PETREL_ASSIGN_OR_RETURN(std::string name, ExpectName());
    targets.push_back(std::move(name));
    if (!SkipOp(",")) break;
    if ((parens && IsOp(")")) || IsName(end_name) || IsOp("=")) break;
  }
  if (parens) PETREL_RETURN_IF_ERROR(ExpectOp(")"));
  return targets;
}

Result<NodePtr> Parser::ParseFor(const Token& at) {
  NodePtr node = MakeNode(NodeKind::kFor, at);
  PETREL_ASSIGN_OR_RETURN(node->targets, ParseAssignTargets("in"));
  if (!SkipName("in")) return Unexpected(Peek(), "'in'");
  PETREL_ASSIGN_OR_RETURN(node->expr, ParseTuple(false, false, "recursive"));
  if (SkipName("if")) {
    PETREL_ASSIGN_OR_RETURN(node->condition, ParseExpression());
  }
  if (IsName("recursive")) return Fail(Peek(), "recursive for loops are not supported");
  PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string matched;
  ++loop_depth_;
  auto body = ParseBody({"endfor", "else"}, &matched);
  --loop_depth_;
  if (!body.ok()) return body.status();
  node->body = std::move(body).value();
  if (matched == "else") {
    PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
    PETREL_ASSIGN_OR_RETURN(node->else_body, ParseBody({"endfor"}, &matched));
  }
  PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

Result<NodePtr> Parser::ParseSet(const Token& at) {
  NodePtr node = MakeNode(NodeKind::kSet, at);
  if (Peek().kind == TokenKind::kName && IsOp(".", 1)) {
    node->targets.push_back(Next().text);
    Next();
    PETREL_ASSIGN_OR_RETURN(node->attr, ExpectName());
  } else {
    PETREL_ASSIGN_OR_RETURN(node->targets, ParseAssignTargets(""));
  }
  if (SkipOp("=")) {
    PETREL_ASSIGN_OR_RETURN(node->expr, ParseTuple(true, false));
    PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }
  if (!node->attr.empty() || node->targets.size() != 1) return Unexpected(Peek(), "'='");
  node->kind = NodeKind::kSetBlock;
  while (SkipOp("|")) {
    PETREL_ASSIGN_OR_RETURN(ExprPtr filter, ParseFilter(nullptr));
    node->filters.push_back(std::move(filter));
  }
  PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string matched;
  PETREL_ASSIGN_OR_RETURN(node->body, ParseBody({"endset"}, &matched));
  PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

Status Parser::ParseParams(Node* node) {
  PETREL_RETURN_IF_ERROR(ExpectOp("("));
  while (!SkipOp(")")) {
    if (!node->params.empty()) PETREL_RETURN_IF_ERROR(ExpectOp(","));
    if (SkipOp(")")) break;
    PETREL_ASSIGN_OR_RETURN(std::string name, ExpectName());
    ExprPtr default_value;
    if (SkipOp("=")) {
      PETREL_ASSIGN_OR_RETURN(default_value, ParseExpression());
    } else if (!node->defaults.empty() && node->defaults.back()) {
      return Fail(Peek(), "non-default argument follows default argument");
    }
    node->params.push_back(std::move(name));
    node->defaults.push_back(std::move(default_value));
  }
  return Status::Ok();
}

Result<NodePtr> Parser::ParseMacro(const Token& at, bool is_call_block) {
  NodePtr node = MakeNode(is_call_block ? NodeKind::kCallBlock : NodeKind::kMacro, at);
  if (is_call_block) {
    if (IsOp("(")) PETREL_RETURN_IF_ERROR(ParseParams(node.get()));
    PETREL_ASSIGN_OR_RETURN(node->expr, ParseExpression());
    if (node->expr->kind != ExprKind::kCall) return Fail(at, "expected a call after 'call'");
  } else {
    PETREL_ASSIGN_OR_RETURN(node->name, ExpectName());
    PETREL_RETURN_IF_ERROR(ParseParams(node.get()));
  }
  PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
  usage_.emplace_back();
  const int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  std::string matched;
  auto body = ParseBody({is_call_block ? "endcall" : "endmacro"}, &matched);
  loop_depth_ = saved_loop_depth;
  const Usage usage = usage_.back();
  usage_.pop_back();
  if (!body.ok()) return body.status();
  node->body = std::move(body).value();
  node->uses_caller = usage.caller;
  node->uses_varargs = usage.varargs;
  node->uses_kwargs = usage.kwargs;
  PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

Result<NodePtr> Parser::ParseFilterBlock(const Token& at) {
  NodePtr node = MakeNode(NodeKind::kFilterBlock, at);
  do {
    PETREL_ASSIGN_OR_RETURN(ExprPtr filter, ParseFilter(nullptr));
    node->filters.push_back(std::move(filter));
  } while (SkipOp("|"));
  PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string matched;
  PETREL_ASSIGN_OR_RETURN(node->body, ParseBody({"endfilter"}, &matched));
  PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

Result<NodePtr> Parser::ParseWith(const Token& at) {
  NodePtr node = MakeNode(NodeKind::kWith, at);
  while (Peek().kind != TokenKind::kBlockEnd) {
    if (!node->targets.empty()) PETREL_RETURN_IF_ERROR(ExpectOp(","));
    PETREL_ASSIGN_OR_RETURN(std::string name, ExpectName());
    PETREL_RETURN_IF_ERROR(ExpectOp("="));
    PETREL_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    node->targets.push_back(std::move(name));
    node->values.push_back(std::move(value));
  }
  Next();
  std::string matched;
  PETREL_ASSIGN_OR_RETURN(node->body, ParseBody({"endwith"}, &matched));
  PETREL_RETURN_IF_ERROR(ExpectBlockEnd());
  return node;
}

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
    PETREL_ASSIGN_OR_RETURN(left, Binary(at.text == "+" ? "+" : "-", std::move(left),
                                         std::move(right), at));
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
      expr->literal = token.kind == TokenKind::kInt ? Value(token.int_value)
                                                    : Value(token.float_value);
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
    default:
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

}  // namespace

Result<NodeList> Parse(std::vector<Token> tokens) {
  if (tokens.empty() || tokens.back().kind != TokenKind::kEof) {
    Token eof;
    tokens.push_back(eof);
  }
  return Parser(std::move(tokens)).Run();
}

}  // namespace petrel::chat
