// Built-in tests, global functions and argument binding (filters live in filters.cc, methods in
// methods.cc).
#include "core/chat/builtins.h"

#include <ctime>
#include <memory>
#include <unordered_map>

#include "core/chat/interpreter.h"
#include "core/chat/operators.h"
#include "core/chat/py_str.h"

namespace petrel::chat {
namespace {

using Args = CallArgs;

// jinja2.sandbox.MAX_RANGE: the immutable sandbox refuses longer ranges.
constexpr int64_t kMaxRange = 100000;

Result<Value> OneArg(const char* test, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs(test, args, {{"other", {}, true}}));
  return a[0];
}

Result<bool> TestDefined(Interpreter&, const Value& v, Args&) { return !v.is_undefined(); }
Result<bool> TestUndefined(Interpreter&, const Value& v, Args&) { return v.is_undefined(); }
Result<bool> TestNone(Interpreter&, const Value& v, Args&) { return v.is_none(); }
Result<bool> TestBoolean(Interpreter&, const Value& v, Args&) { return v.is_bool(); }
Result<bool> TestTrue(Interpreter&, const Value& v, Args&) { return v.is_bool() && v.bool_value(); }
Result<bool> TestFalse(Interpreter&, const Value& v, Args&) {
  return v.is_bool() && !v.bool_value();
}
Result<bool> TestInteger(Interpreter&, const Value& v, Args&) { return v.is_int(); }
Result<bool> TestFloat(Interpreter&, const Value& v, Args&) { return v.is_float(); }
Result<bool> TestNumber(Interpreter&, const Value& v, Args&) { return v.is_number(); }
Result<bool> TestString(Interpreter&, const Value& v, Args&) { return v.is_string(); }
Result<bool> TestMapping(Interpreter&, const Value& v, Args&) {
  return v.is_dict() && !v.dict().is_namespace;
}
Result<bool> TestIterable(Interpreter&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_list() ||
         (v.is_dict() && !v.dict().is_namespace);
}
Result<bool> TestSequence(Interpreter&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || (v.is_list() && !v.is_iterator()) ||
         (v.is_dict() && !v.dict().is_namespace);
}
Result<bool> TestCallable(Interpreter&, const Value& v, Args&) { return v.is_function(); }
Result<bool> TestLower(Interpreter&, const Value& v, Args&) { return PyIsLower(v.Str()); }
Result<bool> TestUpper(Interpreter&, const Value& v, Args&) { return PyIsUpper(v.Str()); }
Result<bool> TestEscaped(Interpreter&, const Value&, Args&) { return false; }

Result<bool> TestOdd(Interpreter&, const Value& v, Args&) {
  PETREL_ASSIGN_OR_RETURN(int64_t n, ToInt(v, "value"));
  return n % 2 != 0;
}
Result<bool> TestEven(Interpreter&, const Value& v, Args&) {
  PETREL_ASSIGN_OR_RETURN(int64_t n, ToInt(v, "value"));
  return n % 2 == 0;
}
Result<bool> TestDivisibleBy(Interpreter& interp, const Value& v, Args& args) {
  PETREL_ASSIGN_OR_RETURN(Value other, OneArg("divisibleby", args));
  PETREL_ASSIGN_OR_RETURN(Value mod, BinaryOp(interp, "%", v, other));
  return !mod.Truthy();
}
Result<bool> TestEq(Interpreter&, const Value& v, Args& args) {
  PETREL_ASSIGN_OR_RETURN(Value other, OneArg("eq", args));
  return Equals(v, other);
}
Result<bool> TestNe(Interpreter&, const Value& v, Args& args) {
  PETREL_ASSIGN_OR_RETURN(Value other, OneArg("ne", args));
  return !Equals(v, other);
}
template <int kLess, bool kEqual>
Result<bool> TestOrder(Interpreter&, const Value& v, Args& args) {
  PETREL_ASSIGN_OR_RETURN(Value other, OneArg("compare", args));
  PETREL_ASSIGN_OR_RETURN(int order, Compare(v, other, kLess < 0 ? "<" : ">"));
  return (kLess < 0 ? order < 0 : order > 0) || (kEqual && order == 0);
}
Result<bool> TestIn(Interpreter&, const Value& v, Args& args) {
  PETREL_ASSIGN_OR_RETURN(Value other, OneArg("in", args));
  return Contains(other, v);
}
Result<bool> TestSameAs(Interpreter&, const Value& v, Args& args) {
  PETREL_ASSIGN_OR_RETURN(Value other, OneArg("sameas", args));
  if (v.identity() || other.identity()) return v.identity() == other.identity();
  return v.kind() == other.kind() && Equals(v, other);
}
Result<bool> TestFilter(Interpreter&, const Value& v, Args&) {
  return v.is_string() && FindFilter(v.str()) != nullptr;
}
Result<bool> TestTest(Interpreter&, const Value& v, Args&) {
  return v.is_string() && FindTest(v.str()) != nullptr;
}

const std::unordered_map<std::string_view, TestFn>& TestTable() {
  static const auto* table = new std::unordered_map<std::string_view, TestFn>{
      {"boolean", TestBoolean},
      {"callable", TestCallable},
      {"defined", TestDefined},
      {"divisibleby", TestDivisibleBy},
      {"eq", TestEq},
      {"equalto", TestEq},
      {"==", TestEq},
      {"escaped", TestEscaped},
      {"even", TestEven},
      {"false", TestFalse},
      {"filter", TestFilter},
      {"float", TestFloat},
      {"ge", TestOrder<1, true>},
      {">=", TestOrder<1, true>},
      {"gt", TestOrder<1, false>},
      {"greaterthan", TestOrder<1, false>},
      {">", TestOrder<1, false>},
      {"in", TestIn},
      {"integer", TestInteger},
      {"iterable", TestIterable},
      {"le", TestOrder<-1, true>},
      {"<=", TestOrder<-1, true>},
      {"lower", TestLower},
      {"lt", TestOrder<-1, false>},
      {"lessthan", TestOrder<-1, false>},
      {"<", TestOrder<-1, false>},
      {"mapping", TestMapping},
      {"ne", TestNe},
      {"!=", TestNe},
      {"none", TestNone},
      {"number", TestNumber},
      {"odd", TestOdd},
      {"sameas", TestSameAs},
      {"sequence", TestSequence},
      {"string", TestString},
      {"test", TestTest},
      {"true", TestTrue},
      {"undefined", TestUndefined},
      {"upper", TestUpper},
  };
  return *table;
}

Result<Value> GlobalRange(Interpreter& interp, Args& args) {
  if (!args.named.empty()) return Error("TypeError: range() takes no keyword arguments");
  std::vector<int64_t> bounds;
  for (const Value& v : args.positional) {
    PETREL_ASSIGN_OR_RETURN(int64_t n, ToInt(v, "range() argument"));
    bounds.push_back(n);
  }
  int64_t start = 0, stop = 0, step = 1;
  if (bounds.size() == 1) {
    stop = bounds[0];
  } else if (bounds.size() == 2 || bounds.size() == 3) {
    start = bounds[0];
    stop = bounds[1];
    if (bounds.size() == 3) step = bounds[2];
  } else {
    return Error("TypeError: range expected 1 to 3 arguments, got %zu", bounds.size());
  }
  if (step == 0) return Error("ValueError: range() arg 3 must not be zero");
  // In unsigned 64-bit arithmetic, exact for any int64 bounds and step (32-bit targets have no
  // 128-bit integers): the distance to cover, when positive, and the step's magnitude.
  const bool empty = step > 0 ? stop <= start : start <= stop;
  const uint64_t span = empty      ? 0
                        : step > 0 ? uint64_t(stop) - uint64_t(start)
                                   : uint64_t(start) - uint64_t(stop);
  const uint64_t stride = step > 0 ? uint64_t(step) : uint64_t(0) - uint64_t(step);
  const uint64_t count = span / stride + (span % stride != 0 ? 1 : 0);
  if (count > uint64_t(kMaxRange)) {
    return Error(
        "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE "
        "(%lld).",
        static_cast<long long>(kMaxRange));
  }
  PETREL_RETURN_IF_ERROR(interp.Step(size_t(count)));
  std::vector<Value> items;
  items.reserve(size_t(count));
  for (int64_t i = 0; i < int64_t(count); ++i) items.emplace_back(start + i * step);
  return Value::List(std::move(items));
}

Status FillDict(Args& args, Value* dict) {
  for (const Value& positional : args.positional) {
    if (positional.is_dict()) {
      for (const auto& [key, value] : positional.dict().entries) dict->dict().Set(key, value);
      continue;
    }
    PETREL_ASSIGN_OR_RETURN(auto pairs, Iterate(positional));
    for (const Value& pair : pairs) {
      PETREL_ASSIGN_OR_RETURN(auto kv, Iterate(pair));
      if (kv.size() != 2)
        return Error("ValueError: dictionary update sequence element has wrong length");
      dict->dict().Set(kv[0], kv[1]);
    }
  }
  for (auto& [key, value] : args.named) dict->dict().Set(Value(key), value);
  return Status::Ok();
}

Result<Value> GlobalNamespace(Interpreter& interp, Args& args) {
  Value ns = Value::Namespace();
  interp.TrackNamespace(ns);
  PETREL_RETURN_IF_ERROR(FillDict(args, &ns));
  return ns;
}

Result<Value> GlobalDict(Interpreter&, Args& args) {
  Value dict = Value::Dict();
  PETREL_RETURN_IF_ERROR(FillDict(args, &dict));
  return dict;
}

Result<Value> GlobalRaise(Interpreter& interp, Args& args) {
  const std::string message = args.positional.empty() ? "" : args.positional[0].Str();
  interp.MarkRaised();
  return ErrorMessage(message);
}

Result<Value> GlobalStrftimeNow(Interpreter& interp, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("strftime_now", args, {{"format", {}, true}}));
  std::tm parts{};
  if (interp.limits().now_unix_seconds) {
    const std::time_t t = std::time_t(*interp.limits().now_unix_seconds);
    gmtime_r(&t, &parts);
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &parts);
  }
  const std::string format = a[0].Str();
  if (format.empty()) return Value("");
  std::string out(format.size() * 8 + 64, '\0');
  const size_t n = std::strftime(out.data(), out.size(), format.c_str(), &parts);
  out.resize(n);
  return Value(std::move(out));
}

Result<Value> GlobalJoiner(Interpreter&, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("joiner", args, {{"sep", Value(", ")}}));
  auto used = std::make_shared<bool>(false);
  const std::string separator = a[0].Str();
  return Value::Function("joiner", [used, separator](Interpreter&, Args&) -> Result<Value> {
    if (!*used) {
      *used = true;
      return Value("");
    }
    return Value(separator);
  });
}

Result<Value> GlobalCycler(Interpreter&, Args& args) {
  if (args.positional.empty()) return Error("TypeError: at least one item has to be provided");
  auto items = std::make_shared<std::vector<Value>>(args.positional);
  auto position = std::make_shared<size_t>(0);
  Value cycler = Value::Namespace();
  cycler.dict().Set(Value("next"), Value::Function("next", [items, position](Interpreter&, Args&) {
                      Value current = (*items)[*position];
                      *position = (*position + 1) % items->size();
                      return Result<Value>(current);
                    }));
  cycler.dict().Set(Value("reset"), Value::Function("reset", [position](Interpreter&, Args&) {
                      *position = 0;
                      return Result<Value>(Value::None());
                    }));
  return cycler;
}

}  // namespace

TestFn FindTest(std::string_view name) {
  const auto& table = TestTable();
  const auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

Value FindGlobal(std::string_view name) {
  struct Global {
    const char* name;
    Result<Value> (*fn)(Interpreter&, Args&);
  };
  static const Global kGlobals[] = {
      {"range", GlobalRange},
      {"namespace", GlobalNamespace},
      {"dict", GlobalDict},
      {"raise_exception", GlobalRaise},
      {"strftime_now", GlobalStrftimeNow},
      {"joiner", GlobalJoiner},
      {"cycler", GlobalCycler},
  };
  for (const Global& global : kGlobals) {
    if (name == global.name) return Value::Function(global.name, global.fn);
  }
  return Value();
}

Result<std::vector<Value>> BindArgs(const char* function, CallArgs& args,
                                    std::initializer_list<Param> params) {
  std::vector<Value> out(params.size());
  std::vector<bool> bound(params.size(), false);
  if (args.positional.size() > params.size()) {
    return Error("TypeError: %s() takes at most %zu argument(s) (%zu given)", function,
                 params.size(), args.positional.size());
  }
  for (size_t i = 0; i < args.positional.size(); ++i) {
    out[i] = args.positional[i];
    bound[i] = true;
  }
  for (auto& [key, value] : args.named) {
    size_t index = 0;
    for (const Param& param : params) {
      if (key == param.name) break;
      ++index;
    }
    if (index == params.size()) {
      return Error("TypeError: %s() got an unexpected keyword argument '%s'", function,
                   key.c_str());
    }
    if (bound[index]) {
      return Error("TypeError: %s() got multiple values for argument '%s'", function, key.c_str());
    }
    out[index] = value;
    bound[index] = true;
  }
  size_t index = 0;
  for (const Param& param : params) {
    if (!bound[index]) {
      if (param.required) {
        return Error("TypeError: %s() missing required argument '%s'", function, param.name);
      }
      out[index] = param.default_value;
    }
    ++index;
  }
  return out;
}

Result<int64_t> ToInt(const Value& value, const char* what) {
  if (value.is_int() || value.is_bool()) return value.int_value();
  if (value.is_undefined()) return ErrorMessage(UndefinedMessage(value));
  return Error("TypeError: %s must be an integer, not '%s'", what, value.TypeName());
}

}  // namespace petrel::chat
