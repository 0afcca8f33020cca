// Python operators on template values (see operators.h).
#include "core/chat/operators.h"

#include <cmath>

#include "core/chat/builtins.h"
#include "core/chat/interpreter.h"
#include "core/chat/py_str.h"

namespace petrel::chat {
namespace {

Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  return Error("TypeError: unsupported operand type(s) for %.*s: '%s' and '%s'", int(op.size()),
               op.data(), a.TypeName(), b.TypeName());
}

bool IsSequence(const Value& v) { return v.is_list() && v.list().kind != SeqKind::kIterator; }

Result<Value> Repeat(Interpreter& interp, const Value& seq, int64_t count) {
  if (count <= 0) return seq.is_string() ? Value("") : Value::List({}, seq.list().kind);
  if (seq.is_string()) {
    PETREL_RETURN_IF_ERROR(interp.CheckSize(seq.str().size() * uint64_t(count)));
    std::string out;
    out.reserve(seq.str().size() * size_t(count));
    for (int64_t i = 0; i < count; ++i) out += seq.str();
    return Value(std::move(out));
  }
  const size_t n = seq.list().items.size() * size_t(count);
  PETREL_RETURN_IF_ERROR(interp.Step(n));
  std::vector<Value> items;
  items.reserve(n);
  for (int64_t i = 0; i < count; ++i) {
    items.insert(items.end(), seq.list().items.begin(), seq.list().items.end());
  }
  return Value::List(std::move(items), seq.list().kind);
}

Result<Value> IntPow(int64_t base, int64_t exponent) {
  int64_t result = 1;
  while (exponent > 0) {
    if ((exponent & 1) && __builtin_mul_overflow(result, base, &result)) {
      return Error("OverflowError: integer result too large");
    }
    exponent >>= 1;
    if (exponent > 0 && __builtin_mul_overflow(base, base, &base)) {
      return Error("OverflowError: integer result too large");
    }
  }
  return Value(result);
}

}  // namespace

Result<Value> BinaryOp(Interpreter& interp, std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string out = a.Str();
    const std::string right = b.Str();
    PETREL_RETURN_IF_ERROR(interp.CheckSize(out.size() + right.size()));
    return Value(out + right);
  }
  if (a.is_undefined()) return ErrorMessage(UndefinedMessage(a));
  if (b.is_undefined()) return ErrorMessage(UndefinedMessage(b));
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (numbers) {
      if (floats) return Value(a.float_value() + b.float_value());
      int64_t sum;
      if (__builtin_add_overflow(a.int_value(), b.int_value(), &sum)) {
        return Error("OverflowError: integer result too large");
      }
      return Value(sum);
    }
    if (a.is_string() && b.is_string()) {
      PETREL_RETURN_IF_ERROR(interp.CheckSize(a.str().size() + b.str().size()));
      if (a.is_markup() != b.is_markup()) {
        // Markup + str escapes the plain side (MarkupSafe's __add__ / __radd__).
        return Value::Markup(a.is_markup() ? a.str() + HtmlEscape(b.str())
                                           : HtmlEscape(a.str()) + b.str());
      }
      return a.is_markup() ? Value::Markup(a.str() + b.str()) : Value(a.str() + b.str());
    }
    if (IsSequence(a) && IsSequence(b) && a.list().kind == b.list().kind) {
      std::vector<Value> items = a.list().items;
      PETREL_RETURN_IF_ERROR(interp.Step(b.list().items.size()));
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return Value::List(std::move(items), a.list().kind);
    }
    if (a.is_string() || IsSequence(a)) {
      return Error("TypeError: can only concatenate %s (not \"%s\") to %s", a.TypeName(),
                   b.TypeName(), a.TypeName());
    }
    return Unsupported(op, a, b);
  }
  if (op == "-") {
    if (!numbers) return Unsupported(op, a, b);
    if (floats) return Value(a.float_value() - b.float_value());
    int64_t diff;
    if (__builtin_sub_overflow(a.int_value(), b.int_value(), &diff)) {
      return Error("OverflowError: integer result too large");
    }
    return Value(diff);
  }
  if (op == "*") {
    if (numbers) {
      if (floats) return Value(a.float_value() * b.float_value());
      int64_t product;
      if (__builtin_mul_overflow(a.int_value(), b.int_value(), &product)) {
        return Error("OverflowError: integer result too large");
      }
      return Value(product);
    }
    if ((a.is_string() || IsSequence(a)) && (b.is_int() || b.is_bool())) {
      return Repeat(interp, a, b.int_value());
    }
    if ((b.is_string() || IsSequence(b)) && (a.is_int() || a.is_bool())) {
      return Repeat(interp, b, a.int_value());
    }
    return Error("TypeError: can't multiply sequence by non-int of type '%s'",
                 (a.is_string() || IsSequence(a)) ? b.TypeName() : a.TypeName());
  }
  if (op == "/") {
    if (!numbers) return Unsupported(op, a, b);
    if (b.float_value() == 0) return Error("ZeroDivisionError: division by zero");
    return Value(a.float_value() / b.float_value());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) {
      PETREL_ASSIGN_OR_RETURN(std::string text, PercentFormat(a.str(), b));
      PETREL_RETURN_IF_ERROR(interp.CheckSize(text.size()));
      return Value(std::move(text));
    }
    if (!numbers) return Unsupported(op, a, b);
    if (floats) {
      const double x = a.float_value(), y = b.float_value();
      if (y == 0) {
        return Error(op == "%" ? "ZeroDivisionError: float modulo"
                               : "ZeroDivisionError: float floor division by zero");
      }
      double mod = std::fmod(x, y);
      if (mod != 0 && ((mod < 0) != (y < 0))) mod += y;
      if (op == "%") return Value(mod);
      return Value(std::floor(x / y));
    }
    const int64_t x = a.int_value(), y = b.int_value();
    if (y == 0) {
      return Error(op == "%" ? "ZeroDivisionError: integer modulo by zero"
                             : "ZeroDivisionError: integer division or modulo by zero");
    }
    if (x == INT64_MIN && y == -1) return Error("OverflowError: integer result too large");
    int64_t quotient = x / y, mod = x % y;
    if (mod != 0 && ((mod < 0) != (y < 0))) {
      mod += y;
      --quotient;
    }
    return op == "%" ? Value(mod) : Value(quotient);
  }
  if (op == "**") {
    if (!numbers) return Unsupported(op, a, b);
    if (!floats && b.int_value() >= 0) return IntPow(a.int_value(), b.int_value());
    if (a.float_value() == 0 && b.float_value() < 0) {
      return Error("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    }
    return Value(std::pow(a.float_value(), b.float_value()));
  }
  return Error("unknown operator %.*s", int(op.size()), op.data());
}

Result<Value> UnaryOp(std::string_view op, const Value& operand) {
  if (operand.is_undefined()) return ErrorMessage(UndefinedMessage(operand));
  if (!operand.is_number()) {
    return Error("TypeError: bad operand type for unary %.*s: '%s'", int(op.size()), op.data(),
                 operand.TypeName());
  }
  if (op == "+") return operand.is_float() ? operand : Value(operand.int_value());
  if (operand.is_float()) return Value(-operand.float_value());
  if (operand.int_value() == INT64_MIN) return Error("OverflowError: integer result too large");
  return Value(-operand.int_value());
}

Result<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case ValueKind::kUndefined:
      return false;
    case ValueKind::kString:
      if (!item.is_string()) {
        return Error("TypeError: 'in <string>' requires string as left operand, not %s",
                     item.TypeName());
      }
      return container.str().find(item.str()) != std::string::npos;
    case ValueKind::kList:
      for (const Value& element : container.list().items) {
        if (Equals(element, item)) return true;
      }
      return false;
    case ValueKind::kDict:
      if (container.dict().is_namespace) break;
      if (item.is_list() || item.is_dict()) {
        return Error("TypeError: unhashable type: '%s'", item.TypeName());
      }
      return container.dict().Find(item) != nullptr;
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kFunction:
      break;
  }
  return Error("TypeError: argument of type '%s' is not iterable", container.TypeName());
}

Result<Value> Slice(const Value& container, const Value& start_value, const Value& stop_value,
                    const Value& step_value) {
  auto bound = [](const Value& v) -> Result<std::optional<int64_t>> {
    if (v.is_none()) return std::optional<int64_t>();
    if (v.is_int() || v.is_bool()) return std::optional<int64_t>(v.int_value());
    return Error("TypeError: slice indices must be integers or None or have an __index__ method");
  };
  PETREL_ASSIGN_OR_RETURN(std::optional<int64_t> start, bound(start_value));
  PETREL_ASSIGN_OR_RETURN(std::optional<int64_t> stop, bound(stop_value));
  PETREL_ASSIGN_OR_RETURN(std::optional<int64_t> step_opt, bound(step_value));
  const int64_t step = step_opt.value_or(1);
  if (step == 0) return Error("ValueError: slice step cannot be zero");

  std::u32string code_points;
  const bool is_string = container.is_string();
  const bool ascii = is_string && IsAscii(container.str());
  int64_t length = 0;
  if (is_string) {
    if (!ascii) code_points = DecodeUtf8(container.str());
    length = ascii ? int64_t(container.str().size()) : int64_t(code_points.size());
  } else if (IsSequence(container)) {
    length = int64_t(container.list().items.size());
  } else {
    return Error("TypeError: '%s' object is not subscriptable", container.TypeName());
  }
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> index, int64_t fallback) {
    if (!index) return fallback;
    int64_t i = *index;
    if (i < 0) {
      i += length;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= length) {
      i = step < 0 ? length - 1 : length;
    }
    return i;
  };
  const int64_t first = adjust(start, step < 0 ? length - 1 : 0);
  const int64_t last = adjust(stop, step < 0 ? -1 : length);
  std::vector<int64_t> indices;
  for (int64_t i = first; step > 0 ? i < last : i > last; i += step) indices.push_back(i);
  if (is_string) {
    std::string out;
    for (int64_t i : indices) {
      if (ascii) {
        out += container.str()[size_t(i)];
      } else {
        AppendUtf8(code_points[size_t(i)], &out);
      }
    }
    return Value(std::move(out));
  }
  std::vector<Value> items;
  items.reserve(indices.size());
  for (int64_t i : indices) items.push_back(container.list().items[size_t(i)]);
  return Value::List(std::move(items), container.list().kind);
}

}  // namespace petrel::chat
