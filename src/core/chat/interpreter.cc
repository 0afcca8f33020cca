// Template execution (see interpreter.h): statements here, expressions in eval.cc.
#include "core/chat/interpreter.h"

#include <pthread.h>

#include <algorithm>

#include "core/chat/builtins.h"

namespace petrel::chat {
namespace {

// Half of this thread's stack: recursion (macros calling macros, nested expressions) stops with
// an error well before it could overflow, whatever the build's frame sizes.
size_t StackBudgetBytes() {
  size_t stack_bytes = 0;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstacksize(&attr, &stack_bytes);
    pthread_attr_destroy(&attr);
  }
  if (stack_bytes == 0) stack_bytes = 1 << 20;
  return std::min<size_t>(stack_bytes / 2, 64 << 20);
}

}  // namespace

const Value* Scope::Find(std::string_view name) const {
  for (const Scope* scope = this; scope; scope = scope->parent.get()) {
    for (const auto& [key, value] : scope->vars) {
      if (key == name) return &value;
    }
  }
  return nullptr;
}

void Scope::Set(std::string_view name, Value value) {
  for (auto& [key, existing] : vars) {
    if (key == name) {
      existing = std::move(value);
      return;
    }
  }
  vars.emplace_back(std::string(name), std::move(value));
}

Result<std::string> Interpreter::Render(const NodeList& nodes, const Value& context) {
  stack_base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  stack_budget_bytes_ = StackBudgetBytes();
  globals_ = std::make_shared<Scope>();
  if (context.is_dict()) {
    for (const auto& [key, value] : context.dict().entries) {
      if (key.is_string()) globals_->Set(key.str(), value);
    }
  }
  // Top-level `set` writes to a scope of its own, above the caller's variables.
  auto top = std::make_shared<Scope>();
  top->parent = globals_;
  std::string out;
  const Status status = Exec(nodes, top, &out);
  // Break cycles between scopes and the macros defined in them.
  top->vars.clear();
  globals_->vars.clear();
  for (const auto& weak : namespaces_) {
    if (auto ns = weak.lock()) ns->entries.clear();
  }
  if (status.ok()) return out;
  if (raised_) return status;
  if (error_line_ > 0) {
    return Error("%d:%d: %s", error_line_, error_column_, status.message().c_str());
  }
  return status;
}

Status Interpreter::CheckStack() const {
  const uintptr_t here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (stack_base_ > here && stack_base_ - here > stack_budget_bytes_) {
    return Error("RecursionError: template nesting too deep for the stack (%zu KiB used)",
                 size_t(stack_base_ - here) >> 10);
  }
  return Status::Ok();
}

Status Interpreter::Step(size_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    return Error("template exceeded the step limit (%zu steps)", limits_.max_steps);
  }
  return Status::Ok();
}

Status Interpreter::CheckSize(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    return Error("template output exceeded the size limit (%zu bytes)", limits_.max_output_bytes);
  }
  return Status::Ok();
}

Status Interpreter::Append(std::string_view text, std::string* out) {
  PETREL_RETURN_IF_ERROR(CheckSize(out->size() + text.size()));
  out->append(text);
  return Status::Ok();
}

Status Interpreter::NoteError(const Status& status, int line, int column) {
  if (!status.ok() && error_line_ == 0 && !raised_) {
    error_line_ = line;
    error_column_ = column;
  }
  return status;
}

Status Interpreter::Exec(const NodeList& nodes, const ScopePtr& scope, std::string* out) {
  for (const NodePtr& node : nodes) {
    PETREL_RETURN_IF_ERROR(NoteError(ExecNode(*node, scope, out), node->line, node->column));
    if (flow_ != Flow::kNormal) break;
  }
  return Status::Ok();
}

Status Interpreter::ExecNode(const Node& node, const ScopePtr& scope, std::string* out) {
  PETREL_RETURN_IF_ERROR(CheckStack());
  PETREL_RETURN_IF_ERROR(Step());
  switch (node.kind) {
    case NodeKind::kText:
      return Append(node.text, out);
    case NodeKind::kEmit: {
      PETREL_ASSIGN_OR_RETURN(Value value, Eval(*node.expr, scope));
      if (value.is_string()) return Append(value.str(), out);
      return Append(value.Str(), out);
    }
    case NodeKind::kIf:
      for (const IfBranch& branch : node.branches) {
        bool taken = true;
        if (branch.condition) {
          PETREL_ASSIGN_OR_RETURN(Value condition, Eval(*branch.condition, scope));
          taken = condition.Truthy();
        }
        if (taken) return Exec(branch.body, scope, out);
      }
      return Status::Ok();
    case NodeKind::kFor:
      return ExecFor(node, scope, out);
    case NodeKind::kSet:
      return ExecSet(node, scope);
    case NodeKind::kSetBlock: {
      std::string captured;
      PETREL_RETURN_IF_ERROR(Exec(node.body, scope, &captured));
      PETREL_ASSIGN_OR_RETURN(Value value,
                              ApplyFilterChain(node.filters, Value(std::move(captured)), scope));
      scope->Set(node.targets[0], std::move(value));
      return Status::Ok();
    }
    case NodeKind::kMacro:
      scope->Set(node.name, MakeMacro(node, scope));
      return Status::Ok();
    case NodeKind::kCallBlock:
      return ExecCallBlock(node, scope, out);
    case NodeKind::kFilterBlock: {
      std::string captured;
      PETREL_RETURN_IF_ERROR(Exec(node.body, scope, &captured));
      PETREL_ASSIGN_OR_RETURN(Value value,
                              ApplyFilterChain(node.filters, Value(std::move(captured)), scope));
      return Append(value.Str(), out);
    }
    case NodeKind::kWith: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      for (size_t i = 0; i < node.targets.size(); ++i) {
        PETREL_ASSIGN_OR_RETURN(Value value, Eval(*node.values[i], scope));
        inner->Set(node.targets[i], std::move(value));
      }
      return Exec(node.body, inner, out);
    }
    case NodeKind::kBody:
      return Exec(node.body, scope, out);
    case NodeKind::kBreak:
      flow_ = Flow::kBreak;
      return Status::Ok();
    case NodeKind::kContinue:
      flow_ = Flow::kContinue;
      return Status::Ok();
  }
  return Status::Ok();
}

Status Interpreter::Assign(const std::vector<std::string>& targets, const Value& value,
                           Scope* scope) {
  if (targets.size() == 1) {
    scope->Set(targets[0], value);
    return Status::Ok();
  }
  PETREL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  if (items.size() < targets.size()) {
    return Error("ValueError: not enough values to unpack (expected %zu, got %zu)", targets.size(),
                 items.size());
  }
  if (items.size() > targets.size()) {
    return Error("ValueError: too many values to unpack (expected %zu)", targets.size());
  }
  for (size_t i = 0; i < targets.size(); ++i) scope->Set(targets[i], items[i]);
  return Status::Ok();
}

Status Interpreter::ExecFor(const Node& node, const ScopePtr& scope, std::string* out) {
  PETREL_ASSIGN_OR_RETURN(Value iterable, Eval(*node.expr, scope));
  PETREL_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(iterable));
  if (node.condition) {
    // The inline `if` filters before `loop` counts, as in jinja2.
    std::vector<Value> kept;
    for (Value& item : items) {
      PETREL_RETURN_IF_ERROR(Step());
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      PETREL_RETURN_IF_ERROR(Assign(node.targets, item, probe.get()));
      PETREL_ASSIGN_OR_RETURN(Value keep, Eval(*node.condition, probe));
      if (keep.Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    return Exec(node.else_body, inner, out);
  }
  const int64_t length = int64_t(items.size());
  for (int64_t i = 0; i < length; ++i) {
    PETREL_RETURN_IF_ERROR(Step());
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    PETREL_RETURN_IF_ERROR(Assign(node.targets, items[size_t(i)], inner.get()));
    Value loop = Value::Dict();
    DictData& data = loop.dict();
    data.entries.reserve(12);
    data.entries.emplace_back(Value("index"), Value(i + 1));
    data.entries.emplace_back(Value("index0"), Value(i));
    data.entries.emplace_back(Value("revindex"), Value(length - i));
    data.entries.emplace_back(Value("revindex0"), Value(length - i - 1));
    data.entries.emplace_back(Value("first"), Value(i == 0));
    data.entries.emplace_back(Value("last"), Value(i == length - 1));
    data.entries.emplace_back(Value("length"), Value(length));
    data.entries.emplace_back(Value("depth"), Value(1));
    data.entries.emplace_back(Value("depth0"), Value(0));
    if (i > 0) data.entries.emplace_back(Value("previtem"), items[size_t(i - 1)]);
    if (i + 1 < length) data.entries.emplace_back(Value("nextitem"), items[size_t(i + 1)]);
    data.entries.emplace_back(
        Value("cycle"), Value::Function("loop.cycle", [i](Interpreter&, CallArgs& args) {
          if (args.positional.empty()) {
            return Result<Value>(Error("TypeError: no items for cycling given"));
          }
          return Result<Value>(args.positional[size_t(i) % args.positional.size()]);
        }));
    inner->Set("loop", std::move(loop));
    PETREL_RETURN_IF_ERROR(Exec(node.body, inner, out));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  return Status::Ok();
}

Status Interpreter::ExecSet(const Node& node, const ScopePtr& scope) {
  PETREL_ASSIGN_OR_RETURN(Value value, Eval(*node.expr, scope));
  if (node.attr.empty()) return Assign(node.targets, value, scope.get());
  const Value* target = scope->Find(node.targets[0]);
  if (!target || !target->is_dict() || !target->dict().is_namespace) {
    return Error("TemplateRuntimeError: cannot assign attribute on non-namespace object");
  }
  target->dict().Set(Value(node.attr), std::move(value));
  return Status::Ok();
}

Result<Value> Interpreter::ApplyFilterChain(const std::vector<ExprPtr>& filters, Value subject,
                                            const ScopePtr& scope) {
  for (const ExprPtr& filter : filters) {
    CallArgs args;
    PETREL_RETURN_IF_ERROR(EvalArgs(*filter, 1, scope, &args));
    PETREL_ASSIGN_OR_RETURN(subject, ApplyFilter(filter->name, subject, std::move(args)));
  }
  return subject;
}

Value Interpreter::MakeMacro(const Node& node, const ScopePtr& scope) {
  // A weak reference: the macro is usually stored in the very scope it closes over.
  std::weak_ptr<Scope> closure = scope;
  const Node* definition = &node;
  return Value::Function(node.name.empty() ? "caller" : node.name,
                         [definition, closure](Interpreter& interp, CallArgs& args) {
                           return interp.CallMacro(*definition, closure, args);
                         });
}

Result<Value> Interpreter::CallMacro(const Node& node, const std::weak_ptr<Scope>& closure,
                                     CallArgs& args) {
  const std::string name = node.name.empty() ? "caller" : node.name;
  if (call_depth_ >= limits_.max_depth) {
    return Error("RecursionError: template call depth exceeded the limit (%zu)", limits_.max_depth);
  }
  auto scope = std::make_shared<Scope>();
  scope->parent = closure.lock();
  if (!scope->parent) scope->parent = globals_;
  std::vector<bool> bound(node.params.size(), false);
  std::vector<Value> varargs;
  Value kwargs = Value::Dict();
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < node.params.size()) {
      scope->Set(node.params[i], args.positional[i]);
      bound[i] = true;
    } else if (node.uses_varargs) {
      varargs.push_back(args.positional[i]);
    } else {
      return Error("TypeError: macro '%s' takes not more than %zu argument(s)", name.c_str(),
                   node.params.size());
    }
  }
  bool has_caller = false;
  for (auto& [key, value] : args.named) {
    size_t index = 0;
    while (index < node.params.size() && node.params[index] != key) ++index;
    if (index < node.params.size()) {
      if (bound[index]) {
        return Error("TypeError: macro '%s' got multiple values for argument '%s'", name.c_str(),
                     key.c_str());
      }
      scope->Set(key, value);
      bound[index] = true;
    } else if (key == "caller" && node.uses_caller) {
      scope->Set("caller", value);
      has_caller = true;
    } else if (node.uses_kwargs) {
      kwargs.dict().Set(Value(key), value);
    } else {
      return Error("TypeError: macro '%s' takes no keyword argument '%s'", name.c_str(),
                   key.c_str());
    }
  }
  for (size_t i = 0; i < node.params.size(); ++i) {
    if (bound[i]) continue;
    if (node.defaults[i]) {
      PETREL_ASSIGN_OR_RETURN(Value value, Eval(*node.defaults[i], scope));
      scope->Set(node.params[i], std::move(value));
    } else {
      scope->Set(node.params[i], Value::Undefined("UndefinedError: parameter '" + node.params[i] +
                                                  "' was not provided"));
    }
  }
  if (node.uses_varargs) scope->Set("varargs", Value::List(std::move(varargs), SeqKind::kTuple));
  if (node.uses_kwargs) scope->Set("kwargs", std::move(kwargs));
  if (node.uses_caller && !has_caller) {
    scope->Set("caller", Value::Undefined("UndefinedError: 'caller' is undefined"));
  }
  ++call_depth_;
  const Flow saved_flow = flow_;
  flow_ = Flow::kNormal;
  std::string out;
  const Status status = Exec(node.body, scope, &out);
  flow_ = saved_flow;
  --call_depth_;
  scope->vars.clear();  // macros defined inside refer back to this scope
  PETREL_RETURN_IF_ERROR(status);
  return Value(std::move(out));
}

Status Interpreter::ExecCallBlock(const Node& node, const ScopePtr& scope, std::string* out) {
  const Expr& call = *node.expr;
  PETREL_ASSIGN_OR_RETURN(Value callee, Eval(*call.children[0], scope));
  CallArgs args;
  PETREL_RETURN_IF_ERROR(EvalArgs(call, 1, scope, &args));
  args.named.emplace_back("caller", MakeMacro(node, scope));
  PETREL_ASSIGN_OR_RETURN(Value result, Call(callee, std::move(args)));
  return Append(result.Str(), out);
}

}  // namespace petrel::chat
