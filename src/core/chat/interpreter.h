// Executes a parsed template: scopes, statements, expressions and the render limits.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/chat/ast.h"
#include "core/chat/value.h"
#include "core/base/status.h"

namespace petrel::chat {

// Bounds on one render, so that a hostile or buggy template fails cleanly.
struct RenderLimits {
  size_t max_steps = 10'000'000;       // statements, expressions and loop iterations
  size_t max_output_bytes = 16 << 20;  // the rendered text, and any one string built on the way
  size_t max_depth = 256;              // nested macro / caller calls
  // The moment `strftime_now` formats, in seconds since the epoch (formatted as UTC); unset:
  // the current local time.
  std::optional<int64_t> now_unix_seconds;
};

// Variables of one scope; lookups walk to the parent. Loop iterations, macro calls and `with`
// blocks get their own scope, so `set` inside them does not leak out (as in jinja2).
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* Find(std::string_view name) const;
  void Set(std::string_view name, Value value);
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  explicit Interpreter(const RenderLimits& limits) : limits_(limits) {}

  // Renders `nodes` with the variables of `context` (a dict). Errors raised by
  // `raise_exception(message)` are exactly `message`; others read "line:column: message".
  Result<std::string> Render(const NodeList& nodes, const Value& context);

  // Services for filters, tests and methods.
  const RenderLimits& limits() const { return limits_; }
  // Counts `n` steps against max_steps.
  Status Step(size_t n = 1);
  // Fails when a string of `bytes` would exceed max_output_bytes.
  Status CheckSize(size_t bytes) const;
  Result<Value> Call(const Value& callee, CallArgs args);
  Result<Value> ApplyFilter(const std::string& name, const Value& subject, CallArgs args);
  Result<bool> ApplyTest(const std::string& name, const Value& subject, CallArgs args);
  // `obj.name` (attribute, then item) and `obj[key]` (item, then attribute), as jinja2's sandbox
  // does them: misses give an undefined value carrying the error its use would raise.
  Value GetAttr(const Value& object, const std::string& name);
  Value GetItem(const Value& object, const Value& key);
  // Namespaces are the only mutable values, hence the only way to build a reference cycle; the
  // render empties every namespace it created when it ends.
  void TrackNamespace(const Value& ns) { namespaces_.push_back(ns.dict_ptr()); }
  // Marks the error being returned as the template's own `raise_exception`.
  void MarkRaised() { raised_ = true; }

 private:
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };

  Status Exec(const NodeList& nodes, const ScopePtr& scope, std::string* out);
  Status ExecNode(const Node& node, const ScopePtr& scope, std::string* out);
  Status ExecFor(const Node& node, const ScopePtr& scope, std::string* out);
  Status ExecSet(const Node& node, const ScopePtr& scope);
  Status ExecCallBlock(const Node& node, const ScopePtr& scope, std::string* out);
  Status Append(std::string_view text, std::string* out);
  Status Assign(const std::vector<std::string>& targets, const Value& value, Scope* scope);
  Result<Value> ApplyFilterChain(const std::vector<ExprPtr>& filters, Value subject,
                                 const ScopePtr& scope);
  Value MakeMacro(const Node& node, const ScopePtr& scope);
  Result<Value> CallMacro(const Node& node, const std::weak_ptr<Scope>& closure, CallArgs& args);

  Result<Value> Eval(const Expr& expr, const ScopePtr& scope);
  Result<Value> EvalInner(const Expr& expr, const ScopePtr& scope);
  Result<Value> EvalCompare(const Expr& expr, const ScopePtr& scope);
  Status EvalArgs(const Expr& expr, size_t first, const ScopePtr& scope, CallArgs* args);
  Result<Value> Lookup(const std::string& name, const ScopePtr& scope);
  Status NoteError(const Status& status, int line, int column);
  // Fails when recursion has used up the render's share of the thread stack.
  Status CheckStack() const;

  RenderLimits limits_;
  size_t steps_ = 0;
  size_t call_depth_ = 0;
  uintptr_t stack_base_ = 0;       // frame address where Render started
  size_t stack_budget_bytes_ = 0;  // how much of this thread's stack a render may use
  Flow flow_ = Flow::kNormal;
  bool raised_ = false;
  int error_line_ = 0;
  int error_column_ = 0;
  ScopePtr globals_;
  std::vector<std::weak_ptr<DictData>> namespaces_;
};

}  // namespace petrel::chat
