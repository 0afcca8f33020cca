// The parser's state and helpers, shared by parser.cc (statements) and parse_expression.cc
// (expressions). Internal to the chat-template engine.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/chat/parser.h"

namespace petrel::chat::internal {

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

}  // namespace petrel::chat::internal
