// Methods of str, dict and list, and Python's two string-formatting mini-languages (`%` and
// `str.format`).
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "core/chat/builtins.h"
#include "core/chat/interpreter.h"
#include "core/chat/py_str.h"

namespace petrel::chat {
namespace {

using Args = CallArgs;
using Method = Result<Value> (*)(Interpreter&, const Value& self, Args& args);

std::optional<std::string> OptionalString(const Value& value) {
  if (value.is_none() || value.is_undefined()) return std::nullopt;
  return value.Str();
}

Result<Value> StringList(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& part : parts) items.emplace_back(std::move(part));
  return Value::List(std::move(items));
}

template <bool kLeft, bool kRight>
Result<Value> StrStrip(Interpreter&, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("strip", args, {{"chars", Value::None()}}));
  return Value(PyStrip(self.str(), OptionalString(a[0]), kLeft, kRight));
}

template <bool kRight>
Result<Value> StrSplit(Interpreter&, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(
      auto a, BindArgs("split", args, {{"sep", Value::None()}, {"maxsplit", Value(-1)}}));
  const std::optional<std::string> sep = OptionalString(a[0]);
  if (sep && sep->empty()) return Error("ValueError: empty separator");
  PETREL_ASSIGN_OR_RETURN(int64_t max_split, ToInt(a[1], "maxsplit"));
  return StringList(kRight ? PyRSplit(self.str(), sep, max_split)
                           : PySplit(self.str(), sep, max_split));
}

Result<Value> StrSplitLines(Interpreter&, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("splitlines", args, {{"keepends", Value(false)}}));
  return StringList(PySplitLines(self.str(), a[0].Truthy()));
}

// Byte offsets of the code-point range [start, end) of `text`, Python index rules.
std::pair<size_t, size_t> ByteRange(const std::string& text, const Value& start, const Value& end) {
  const std::u32string cps = DecodeUtf8(text);
  const int64_t n = int64_t(cps.size());
  auto clamp = [n](const Value& v, int64_t fallback) {
    if (!(v.is_int() || v.is_bool())) return fallback;
    int64_t i = v.int_value();
    if (i < 0) i = std::max<int64_t>(0, i + n);
    return std::min(i, n);
  };
  const int64_t first = clamp(start, 0), last = std::max(clamp(end, n), clamp(start, 0));
  const size_t begin = EncodeUtf8(std::u32string_view(cps).substr(0, size_t(first))).size();
  const size_t stop = EncodeUtf8(std::u32string_view(cps).substr(0, size_t(last))).size();
  return {begin, stop};
}

template <bool kEnds>
Result<Value> StrStartsWith(Interpreter&, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(
      auto a, BindArgs(kEnds ? "endswith" : "startswith", args,
                       {{"prefix", {}, true}, {"start", Value::None()}, {"end", Value::None()}}));
  const auto [begin, stop] = ByteRange(self.str(), a[1], a[2]);
  const std::string_view text = std::string_view(self.str()).substr(begin, stop - begin);
  std::vector<Value> candidates;
  if (a[0].is_string()) {
    candidates.push_back(a[0]);
  } else if (a[0].is_list() && a[0].list().kind == SeqKind::kTuple) {
    candidates = a[0].list().items;
  } else {
    return Error("TypeError: %s first arg must be str or a tuple of str, not %s",
                 kEnds ? "endswith" : "startswith", a[0].TypeName());
  }
  for (const Value& candidate : candidates) {
    const std::string& s = candidate.str();
    if (s.size() <= text.size() &&
        (kEnds ? text.substr(text.size() - s.size()) == s : text.substr(0, s.size()) == s)) {
      return Value(true);
    }
  }
  return Value(false);
}

template <std::string (*Fn)(std::string_view)>
Result<Value> StrCase(Interpreter&, const Value& self, Args& args) {
  PETREL_RETURN_IF_ERROR(BindArgs("method", args, {}).status());
  return Value(Fn(self.str()));
}

Result<Value> StrReplace(Interpreter& interp, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(
      auto a,
      BindArgs("replace", args, {{"old", {}, true}, {"new", {}, true}, {"count", Value(-1)}}));
  if (!a[0].is_string() || !a[1].is_string()) {
    return Error("TypeError: replace() argument must be str");
  }
  PETREL_ASSIGN_OR_RETURN(int64_t count, ToInt(a[2], "count"));
  std::string out = PyReplace(self.str(), a[0].str(), a[1].str(), count);
  PETREL_RETURN_IF_ERROR(interp.CheckSize(out.size()));
  return Value(std::move(out));
}

// find / rfind / index / rindex / count.
template <bool kReverse, bool kRaise>
Result<Value> StrFind(Interpreter&, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(
      auto a, BindArgs("find", args,
                       {{"sub", {}, true}, {"start", Value::None()}, {"end", Value::None()}}));
  if (!a[0].is_string()) return Error("TypeError: must be str, not %s", a[0].TypeName());
  const auto [begin, stop] = ByteRange(self.str(), a[1], a[2]);
  const std::string_view text = std::string_view(self.str()).substr(begin, stop - begin);
  const size_t hit = kReverse ? text.rfind(a[0].str()) : text.find(a[0].str());
  if (hit == std::string_view::npos) {
    if (kRaise) return Error("ValueError: substring not found");
    return Value(-1);
  }
  return Value(int64_t(CodePointCount(std::string_view(self.str()).substr(0, begin + hit))));
}

Result<Value> StrCount(Interpreter&, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("count", args, {{"sub", {}, true}}));
  if (!a[0].is_string()) return Error("TypeError: must be str, not %s", a[0].TypeName());
  const std::string& sub = a[0].str();
  if (sub.empty()) return Value(int64_t(CodePointCount(self.str()) + 1));
  int64_t count = 0;
  for (size_t pos = self.str().find(sub); pos != std::string::npos;
       pos = self.str().find(sub, pos + sub.size())) {
    ++count;
  }
  return Value(count);
}

Result<Value> StrJoin(Interpreter& interp, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("join", args, {{"iterable", {}, true}}));
  PETREL_ASSIGN_OR_RETURN(auto items, Iterate(a[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return Error("TypeError: sequence item %zu: expected str instance, %s found", i,
                   items[i].TypeName());
    }
    if (i) out += self.str();
    out += items[i].str();
    PETREL_RETURN_IF_ERROR(interp.CheckSize(out.size()));
  }
  return Value(std::move(out));
}

template <bool (*Pred)(char32_t)>
Result<Value> StrIs(Interpreter&, const Value& self, Args&) {
  const std::u32string cps = DecodeUtf8(self.str());
  if (cps.empty()) return Value(false);
  for (char32_t c : cps) {
    if (!Pred(c)) return Value(false);
  }
  return Value(true);
}
Result<Value> StrIsUpper(Interpreter&, const Value& self, Args&) {
  return Value(PyIsUpper(self.str()));
}
Result<Value> StrIsLower(Interpreter&, const Value& self, Args&) {
  return Value(PyIsLower(self.str()));
}

// ljust / rjust / center / zfill.
template <char kAlign>
Result<Value> StrPad(Interpreter&, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a,
                          BindArgs("pad", args, {{"width", {}, true}, {"fillchar", Value(" ")}}));
  PETREL_ASSIGN_OR_RETURN(int64_t width, ToInt(a[0], "width"));
  width = std::min<int64_t>(width, 1 << 20);
  const std::string fill = kAlign == 'z' ? "0" : a[1].Str();
  const int64_t length = int64_t(CodePointCount(self.str()));
  if (width <= length) return self;
  const int64_t pad = width - length;
  int64_t left = kAlign == '>' ? pad : kAlign == '^' ? pad / 2 + (pad & width & 1) : 0;
  std::string body = self.str();
  std::string prefix;
  if (kAlign == 'z') {
    left = pad;
    if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
      prefix = body.substr(0, 1);
      body.erase(0, 1);
    }
  }
  std::string out = prefix;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += body;
  for (int64_t i = left; i < pad; ++i) out += fill;
  return Value(std::move(out));
}

template <bool kReverse>
Result<Value> StrPartition(Interpreter&, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("partition", args, {{"sep", {}, true}}));
  const std::string sep = a[0].Str();
  if (sep.empty()) return Error("ValueError: empty separator");
  const size_t hit = kReverse ? self.str().rfind(sep) : self.str().find(sep);
  if (hit == std::string::npos) {
    return kReverse ? Value::List({Value(""), Value(""), self}, SeqKind::kTuple)
                    : Value::List({self, Value(""), Value("")}, SeqKind::kTuple);
  }
  return Value::List(
      {Value(self.str().substr(0, hit)), Value(sep), Value(self.str().substr(hit + sep.size()))},
      SeqKind::kTuple);
}

template <bool kSuffix>
Result<Value> StrRemoveAffix(Interpreter&, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("removeprefix", args, {{"affix", {}, true}}));
  const std::string affix = a[0].Str();
  const std::string& s = self.str();
  if (affix.size() <= s.size()) {
    if (!kSuffix && s.compare(0, affix.size(), affix) == 0) return Value(s.substr(affix.size()));
    if (kSuffix && s.compare(s.size() - affix.size(), affix.size(), affix) == 0) {
      return Value(s.substr(0, s.size() - affix.size()));
    }
  }
  return self;
}

Result<Value> StrFormat(Interpreter& interp, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(std::string text, BraceFormat(interp, self.str(), args));
  PETREL_RETURN_IF_ERROR(interp.CheckSize(text.size()));
  return Value(std::move(text));
}

Result<Value> DictItems(Interpreter&, const Value& self, Args& args) {
  PETREL_RETURN_IF_ERROR(BindArgs("items", args, {}).status());
  std::vector<Value> pairs;
  for (const auto& [key, value] : self.dict().entries) {
    pairs.push_back(Value::List({key, value}, SeqKind::kTuple));
  }
  return Value::List(std::move(pairs));
}

template <bool kKeys>
Result<Value> DictKeysOrValues(Interpreter&, const Value& self, Args& args) {
  PETREL_RETURN_IF_ERROR(BindArgs(kKeys ? "keys" : "values", args, {}).status());
  std::vector<Value> out;
  for (const auto& [key, value] : self.dict().entries) out.push_back(kKeys ? key : value);
  return Value::List(std::move(out));
}

Result<Value> DictGet(Interpreter&, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a,
                          BindArgs("get", args, {{"key", {}, true}, {"default", Value::None()}}));
  if (a[0].is_list() || a[0].is_dict()) {
    return Error("TypeError: unhashable type: '%s'", a[0].TypeName());
  }
  const Value* found = self.dict().Find(a[0]);
  return found ? *found : a[1];
}

Result<Value> Copy(Interpreter&, const Value& self, Args&) {
  if (self.is_dict()) {
    Value copy = Value::Dict();
    copy.dict().entries = self.dict().entries;
    return copy;
  }
  return Value::List(self.list().items, self.list().kind);
}

Result<Value> ListIndex(Interpreter&, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("index", args, {{"value", {}, true}}));
  const auto& items = self.list().items;
  for (size_t i = 0; i < items.size(); ++i) {
    if (Equals(items[i], a[0])) return Value(int64_t(i));
  }
  return Error("ValueError: %s is not in list", a[0].Repr().c_str());
}

Result<Value> ListCount(Interpreter&, const Value& self, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("count", args, {{"value", {}, true}}));
  int64_t count = 0;
  for (const Value& item : self.list().items) count += Equals(item, a[0]) ? 1 : 0;
  return Value(count);
}

Value Bind(const Value& self, const std::string& name, Method method) {
  return Value::Function(
      name, [self, method](Interpreter& interp, Args& args) { return method(interp, self, args); });
}

Value Unsafe(const Value& self, const std::string& name) {
  return Value::Undefined("SecurityError: access to attribute '" + name + "' of '" +
                          self.TypeName() + "' object is unsafe.");
}

const std::unordered_map<std::string_view, Method>& StringMethods() {
  static const auto* table = new std::unordered_map<std::string_view, Method>{
      {"strip", StrStrip<true, true>},
      {"lstrip", StrStrip<true, false>},
      {"rstrip", StrStrip<false, true>},
      {"split", StrSplit<false>},
      {"rsplit", StrSplit<true>},
      {"splitlines", StrSplitLines},
      {"startswith", StrStartsWith<false>},
      {"endswith", StrStartsWith<true>},
      {"upper", StrCase<PyUpper>},
      {"lower", StrCase<PyLower>},
      {"casefold", StrCase<PyLower>},
      {"title", StrCase<PyTitle>},
      {"capitalize", StrCase<PyCapitalize>},
      {"swapcase", StrCase<PySwapCase>},
      {"replace", StrReplace},
      {"find", StrFind<false, false>},
      {"rfind", StrFind<true, false>},
      {"index", StrFind<false, true>},
      {"rindex", StrFind<true, true>},
      {"count", StrCount},
      {"join", StrJoin},
      {"format", StrFormat},
      {"isalpha", StrIs<IsPyAlpha>},
      {"isalnum", StrIs<IsPyAlnum>},
      {"isdigit", StrIs<IsPyDigit>},
      {"isdecimal", StrIs<IsPyDigit>},
      {"isnumeric", StrIs<IsPyDigit>},
      {"isspace", StrIs<IsPySpace>},
      {"isupper", StrIsUpper},
      {"islower", StrIsLower},
      {"ljust", StrPad<'<'>},
      {"rjust", StrPad<'>'>},
      {"center", StrPad<'^'>},
      {"zfill", StrPad<'z'>},
      {"partition", StrPartition<false>},
      {"rpartition", StrPartition<true>},
      {"removeprefix", StrRemoveAffix<false>},
      {"removesuffix", StrRemoveAffix<true>},
  };
  return *table;
}

bool IsOneOf(const std::string& name, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (name == n) return true;
  }
  return false;
}

}  // namespace

std::optional<Value> FindMethod(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case ValueKind::kString: {
      const auto& table = StringMethods();
      const auto it = table.find(name);
      if (it != table.end()) return Bind(object, name, it->second);
      return std::nullopt;
    }
    case ValueKind::kDict:
      if (object.dict().is_namespace) return std::nullopt;
      if (name == "items") return Bind(object, name, DictItems);
      if (name == "keys") return Bind(object, name, DictKeysOrValues<true>);
      if (name == "values") return Bind(object, name, DictKeysOrValues<false>);
      if (name == "get") return Bind(object, name, DictGet);
      if (name == "copy") return Bind(object, name, Copy);
      if (IsOneOf(name, {"pop", "popitem", "update", "setdefault", "clear"})) {
        return Unsafe(object, name);
      }
      return std::nullopt;
    case ValueKind::kList:
      if (object.is_iterator()) return std::nullopt;
      if (name == "index") return Bind(object, name, ListIndex);
      if (name == "count") return Bind(object, name, ListCount);
      if (object.list().kind == SeqKind::kTuple) return std::nullopt;
      if (name == "copy") return Bind(object, name, Copy);
      if (IsOneOf(name,
                  {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"})) {
        return Unsafe(object, name);
      }
      return std::nullopt;
    case ValueKind::kUndefined:
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kFunction:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace petrel::chat
