// Template parser (see parser.h): statements here, expressions in parse_expression.cc.
#include "core/chat/parser.h"

#include <initializer_list>
#include <string_view>

#include "core/chat/parser_internal.h"

namespace petrel::chat {
namespace internal {

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
      case TokenKind::kVarEnd:
      case TokenKind::kBlockEnd:
      case TokenKind::kName:
      case TokenKind::kString:
      case TokenKind::kInt:
      case TokenKind::kFloat:
      case TokenKind::kOp:
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

}  // namespace internal

Result<NodeList> Parse(std::vector<Token> tokens) {
  if (tokens.empty() || tokens.back().kind != TokenKind::kEof) {
    Token eof;
    tokens.push_back(eof);
  }
  return internal::Parser(std::move(tokens)).Run();
}

}  // namespace petrel::chat
