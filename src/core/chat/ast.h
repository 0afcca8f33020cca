// The syntax tree of a parsed template: expressions (`Expr`) and statements (`Node`).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/chat/value.h"

namespace petrel::chat {

enum class ExprKind : uint8_t {
  kLiteral,  // literal
  kName,     // name
  kList,     // children: items
  kTuple,    // children: items
  kDict,     // children: key, value, key, value, ...
  kGetAttr,  // children[0].name
  kGetItem,  // children[0][children[1]]
  kSlice,    // children[0][children[1]:children[2]:children[3]] (null parts omitted)
  kCall,     // children[0](children[1..], kwargs)
  kFilter,   // children[0] | name(children[1..], kwargs); children[0] null in filter blocks
  kTest,     // children[0] is [not] name(children[1..], kwargs)
  kUnary,    // name ("-", "+") children[0]
  kBinary,   // children[0] name children[1]; name: + - * / // % ** ~
  kAnd,
  kOr,
  kNot,
  kCompare,  // children[0] ops[0] children[1] ops[1] children[2] ...
  kCond,     // children[1] if children[0] else children[2] (null: undefined)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int column = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "notin"
  bool negated = false;          // kTest: `is not`
};

enum class NodeKind : uint8_t {
  kText,         // text
  kEmit,         // {{ expr }}
  kIf,           // branches
  kFor,          // for targets in expr [if cond] body [else else_body]
  kSet,          // set targets = expr; `set ns.attr`: attr set
  kSetBlock,     // set targets[0] [| filters] body endset
  kMacro,        // macro name(params) body
  kCallBlock,    // call(params) expr body
  kFilterBlock,  // filter filters body
  kWith,         // with targets[i] = values[i] body
  kBody,         // generation / block: body rendered in place
  kBreak,
  kContinue,
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct IfBranch {
  ExprPtr condition;  // null for `else`
  NodeList body;
};

struct Node {
  NodeKind kind = NodeKind::kText;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  std::vector<IfBranch> branches;
  std::vector<std::string> targets;
  std::string attr;   // kSet on a namespace attribute: targets[0].attr
  ExprPtr condition;  // kFor inline `if`
  NodeList body;
  NodeList else_body;
  std::vector<ExprPtr> filters;  // kSetBlock / kFilterBlock: kFilter nodes with a null subject
  std::vector<ExprPtr> values;   // kWith
  // Macros and call blocks.
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // per param, null when required
  bool uses_caller = false;
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

}  // namespace petrel::chat
