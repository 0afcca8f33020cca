// Expression evaluation and the lookup rules of jinja2's sandbox (part of Interpreter).
#include <string>

#include "core/chat/builtins.h"
#include "core/chat/interpreter.h"
#include "core/chat/operators.h"
#include "core/chat/py_str.h"

namespace petrel::chat {
namespace {

// jinja2's object_type_repr: "None", "dict object", "str object", ...
std::string ObjectTypeRepr(const Value& value) {
  if (value.is_none()) return "None";
  return std::string(value.TypeName()) + " object";
}

Value MissingAttribute(const Value& object, const std::string& name) {
  return Value::Undefined("UndefinedError: " + PyReprString(ObjectTypeRepr(object)) +
                          " has no attribute " + PyReprString(name));
}

Value MissingElement(const Value& object, const Value& key) {
  if (key.is_string()) return MissingAttribute(object, key.str());
  return Value::Undefined("UndefinedError: " + ObjectTypeRepr(object) + " has no element " +
                          key.Repr());
}

}  // namespace

Value Interpreter::GetAttr(const Value& object, const std::string& name) {
  if (object.is_dict() && object.dict().is_namespace) {
    const Value* found = object.dict().Find(std::string_view(name));
    return found ? *found : MissingAttribute(object, name);
  }
  if (std::optional<Value> method = FindMethod(object, name)) return *method;
  if (object.is_dict()) {
    const Value* found = object.dict().Find(std::string_view(name));
    if (found) return *found;
  }
  return MissingAttribute(object, name);
}

Value Interpreter::GetItem(const Value& object, const Value& key) {
  switch (object.kind()) {
    case ValueKind::kDict: {
      if (key.is_list() || key.is_dict()) break;
      const Value* found = object.dict().Find(key);
      if (found) return *found;
      break;
    }
    case ValueKind::kList: {
      if (object.is_iterator() || !(key.is_int() || key.is_bool())) break;
      const auto& items = object.list().items;
      int64_t index = key.int_value();
      if (index < 0) index += int64_t(items.size());
      if (index >= 0 && index < int64_t(items.size())) return items[size_t(index)];
      break;
    }
    case ValueKind::kString: {
      if (!(key.is_int() || key.is_bool())) break;
      int64_t index = key.int_value();
      const std::string& text = object.str();
      if (IsAscii(text)) {
        if (index < 0) index += int64_t(text.size());
        if (index >= 0 && index < int64_t(text.size())) {
          return Value(std::string(1, text[size_t(index)]));
        }
        break;
      }
      const std::u32string code_points = DecodeUtf8(text);
      if (index < 0) index += int64_t(code_points.size());
      if (index >= 0 && index < int64_t(code_points.size())) {
        std::string out;
        AppendUtf8(code_points[size_t(index)], &out);
        return Value(std::move(out));
      }
      break;
    }
    case ValueKind::kUndefined:
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kFunction:
      break;
  }
  if (key.is_string()) {
    if (std::optional<Value> method = FindMethod(object, key.str())) return *method;
  }
  return MissingElement(object, key);
}

Result<Value> Interpreter::Call(const Value& callee, CallArgs args) {
  if (callee.is_undefined()) return ErrorMessage(UndefinedMessage(callee));
  if (!callee.is_function()) {
    return Error("TypeError: '%s' object is not callable", callee.TypeName());
  }
  PETREL_RETURN_IF_ERROR(Step());
  return callee.function().fn(*this, args);
}

Result<Value> Interpreter::ApplyFilter(const std::string& name, const Value& subject,
                                       CallArgs args) {
  const FilterFn filter = FindFilter(name);
  if (!filter) return Error("TemplateRuntimeError: No filter named '%s' found.", name.c_str());
  PETREL_RETURN_IF_ERROR(Step());
  return filter(*this, subject, args);
}

Result<bool> Interpreter::ApplyTest(const std::string& name, const Value& subject, CallArgs args) {
  const TestFn test = FindTest(name);
  if (!test) return Error("TemplateRuntimeError: No test named '%s' found.", name.c_str());
  PETREL_RETURN_IF_ERROR(Step());
  return test(*this, subject, args);
}

Result<Value> Interpreter::Lookup(const std::string& name, const ScopePtr& scope) {
  if (const Value* found = scope->Find(name)) return *found;
  Value global = FindGlobal(name);
  if (!global.is_undefined()) return global;
  return Value::Undefined("UndefinedError: '" + name + "' is undefined");
}

Status Interpreter::EvalArgs(const Expr& expr, size_t first, const ScopePtr& scope,
                             CallArgs* args) {
  for (size_t i = first; i < expr.children.size(); ++i) {
    PETREL_ASSIGN_OR_RETURN(Value value, Eval(*expr.children[i], scope));
    args->positional.push_back(std::move(value));
  }
  for (const auto& [key, value_expr] : expr.kwargs) {
    PETREL_ASSIGN_OR_RETURN(Value value, Eval(*value_expr, scope));
    args->named.emplace_back(key, std::move(value));
  }
  return Status::Ok();
}

Result<Value> Interpreter::Eval(const Expr& expr, const ScopePtr& scope) {
  PETREL_RETURN_IF_ERROR(CheckStack());
  PETREL_RETURN_IF_ERROR(Step());
  Result<Value> result = EvalInner(expr, scope);
  if (!result.ok()) {
    return NoteError(result.status(), expr.line, expr.column);
  }
  if (result->is_string()) PETREL_RETURN_IF_ERROR(CheckSize(result->str().size()));
  return result;
}

Result<Value> Interpreter::EvalCompare(const Expr& expr, const ScopePtr& scope) {
  PETREL_ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0], scope));
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    PETREL_ASSIGN_OR_RETURN(Value right, Eval(*expr.children[i + 1], scope));
    const std::string& op = expr.ops[i];
    bool holds;
    if (op == "==") {
      holds = Equals(left, right);
    } else if (op == "!=") {
      holds = !Equals(left, right);
    } else if (op == "in" || op == "notin") {
      PETREL_ASSIGN_OR_RETURN(holds, Contains(right, left));
      if (op == "notin") holds = !holds;
    } else {
      PETREL_ASSIGN_OR_RETURN(const int order, Compare(left, right, op.c_str()));
      holds = op == "<" ? order < 0 : op == "<=" ? order <= 0 : op == ">" ? order > 0 : order >= 0;
    }
    if (!holds) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Result<Value> Interpreter::EvalInner(const Expr& expr, const ScopePtr& scope) {
  switch (expr.kind) {
    case ExprKind::kLiteral:
      return expr.literal;
    case ExprKind::kName:
      return Lookup(expr.name, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(expr.children.size());
      for (const ExprPtr& child : expr.children) {
        PETREL_ASSIGN_OR_RETURN(Value item, Eval(*child, scope));
        items.push_back(std::move(item));
      }
      return Value::List(std::move(items),
                         expr.kind == ExprKind::kList ? SeqKind::kList : SeqKind::kTuple);
    }
    case ExprKind::kDict: {
      Value dict = Value::Dict();
      for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
        PETREL_ASSIGN_OR_RETURN(Value key, Eval(*expr.children[i], scope));
        PETREL_ASSIGN_OR_RETURN(Value value, Eval(*expr.children[i + 1], scope));
        if (key.is_list() || key.is_dict() || key.is_undefined()) {
          return Error("TypeError: unhashable type: '%s'", key.TypeName());
        }
        dict.dict().Set(std::move(key), std::move(value));
      }
      return dict;
    }
    case ExprKind::kGetAttr: {
      PETREL_ASSIGN_OR_RETURN(Value object, Eval(*expr.children[0], scope));
      if (object.is_undefined()) return ErrorMessage(UndefinedMessage(object));
      return GetAttr(object, expr.name);
    }
    case ExprKind::kGetItem: {
      PETREL_ASSIGN_OR_RETURN(Value object, Eval(*expr.children[0], scope));
      if (object.is_undefined()) return ErrorMessage(UndefinedMessage(object));
      PETREL_ASSIGN_OR_RETURN(Value key, Eval(*expr.children[1], scope));
      return GetItem(object, key);
    }
    case ExprKind::kSlice: {
      PETREL_ASSIGN_OR_RETURN(Value object, Eval(*expr.children[0], scope));
      if (object.is_undefined()) return ErrorMessage(UndefinedMessage(object));
      Value bounds[3] = {Value::None(), Value::None(), Value::None()};
      for (int i = 0; i < 3; ++i) {
        if (expr.children[size_t(i) + 1]) {
          PETREL_ASSIGN_OR_RETURN(bounds[i], Eval(*expr.children[size_t(i) + 1], scope));
        }
      }
      return Slice(object, bounds[0], bounds[1], bounds[2]);
    }
    case ExprKind::kCall: {
      PETREL_ASSIGN_OR_RETURN(Value callee, Eval(*expr.children[0], scope));
      if (callee.is_undefined()) return ErrorMessage(UndefinedMessage(callee));
      CallArgs args;
      PETREL_RETURN_IF_ERROR(EvalArgs(expr, 1, scope, &args));
      return Call(callee, std::move(args));
    }
    case ExprKind::kFilter: {
      PETREL_ASSIGN_OR_RETURN(Value subject, Eval(*expr.children[0], scope));
      CallArgs args;
      PETREL_RETURN_IF_ERROR(EvalArgs(expr, 1, scope, &args));
      return ApplyFilter(expr.name, subject, std::move(args));
    }
    case ExprKind::kTest: {
      PETREL_ASSIGN_OR_RETURN(Value subject, Eval(*expr.children[0], scope));
      CallArgs args;
      PETREL_RETURN_IF_ERROR(EvalArgs(expr, 1, scope, &args));
      PETREL_ASSIGN_OR_RETURN(const bool holds, ApplyTest(expr.name, subject, std::move(args)));
      return Value(holds != expr.negated);
    }
    case ExprKind::kUnary: {
      PETREL_ASSIGN_OR_RETURN(Value operand, Eval(*expr.children[0], scope));
      return UnaryOp(expr.name, operand);
    }
    case ExprKind::kBinary: {
      PETREL_ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0], scope));
      PETREL_ASSIGN_OR_RETURN(Value right, Eval(*expr.children[1], scope));
      return BinaryOp(*this, expr.name, left, right);
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      PETREL_ASSIGN_OR_RETURN(Value left, Eval(*expr.children[0], scope));
      if (left.Truthy() == (expr.kind == ExprKind::kOr)) return left;
      return Eval(*expr.children[1], scope);
    }
    case ExprKind::kNot: {
      PETREL_ASSIGN_OR_RETURN(Value operand, Eval(*expr.children[0], scope));
      return Value(!operand.Truthy());
    }
    case ExprKind::kCompare:
      return EvalCompare(expr, scope);
    case ExprKind::kCond: {
      PETREL_ASSIGN_OR_RETURN(Value condition, Eval(*expr.children[0], scope));
      if (condition.Truthy()) return Eval(*expr.children[1], scope);
      if (expr.children[2]) return Eval(*expr.children[2], scope);
      return Value::Undefined(
          "UndefinedError: the inline if-expression evaluated to false and "
          "no else section was defined.");
    }
  }
  return Error("internal: unknown expression kind");
}

}  // namespace petrel::chat
