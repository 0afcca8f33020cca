// Built-in filters (jinja2 3.1's, plus transformers' `tojson`).
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

#include "core/chat/builtins.h"
#include "core/chat/interpreter.h"
#include "core/chat/operators.h"
#include "core/chat/py_str.h"

namespace petrel::chat {
namespace {

using Args = CallArgs;

Value Iterator(std::vector<Value> items, const char* type = "generator") {
  return Value::List(std::move(items), SeqKind::kIterator, type);
}

// `attribute="a.b.0"` as jinja2's make_attrgetter resolves it: item lookup per dotted part,
// integer parts as indexes.
Value ResolvePath(Interpreter& interp, const Value& item, const Value& path) {
  if (!path.is_string()) return interp.GetItem(item, path);
  Value current = item;
  size_t start = 0;
  const std::string& text = path.str();
  while (true) {
    const size_t dot = text.find('.', start);
    const std::string part = text.substr(start, dot == std::string::npos ? dot : dot - start);
    const bool numeric = !part.empty() && part.size() < 18 &&
                         std::all_of(part.begin(), part.end(), [](char c) { return isdigit(c); });
    current = numeric
                  ? interp.GetItem(current, Value(int64_t(std::strtoll(part.c_str(), nullptr, 10))))
                  : interp.GetItem(current, Value(part));
    if (dot == std::string::npos || current.is_undefined()) return current;
    start = dot + 1;
  }
}

// The sort key of case-insensitive comparisons: strings lowered.
Value Folded(const Value& value, bool case_sensitive) {
  if (!case_sensitive && value.is_string()) return Value(PyLower(value.str()));
  return value;
}

Result<std::vector<Value>> Items(const Value& subject) { return Iterate(subject); }

Result<Value> FilterLength(Interpreter&, const Value& subject, Args&) {
  PETREL_ASSIGN_OR_RETURN(int64_t n, Length(subject));
  return Value(n);
}

Result<Value> FilterFirst(Interpreter&, const Value& subject, Args&) {
  PETREL_ASSIGN_OR_RETURN(auto items, Items(subject));
  if (items.empty()) return Value::Undefined("UndefinedError: No first item, sequence was empty.");
  return items.front();
}

Result<Value> FilterLast(Interpreter&, const Value& subject, Args&) {
  PETREL_ASSIGN_OR_RETURN(auto items, Items(subject));
  if (items.empty()) return Value::Undefined("UndefinedError: No last item, sequence was empty.");
  return items.back();
}

Result<Value> FilterJoin(Interpreter& interp, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a,
                          BindArgs("join", args, {{"d", Value("")}, {"attribute", Value::None()}}));
  PETREL_ASSIGN_OR_RETURN(auto items, Items(subject));
  std::string out;
  const std::string separator = a[0].Str();
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += a[1].is_none() ? items[i].Str() : ResolvePath(interp, items[i], a[1]).Str();
    PETREL_RETURN_IF_ERROR(interp.CheckSize(out.size()));
  }
  return Value(std::move(out));
}

template <std::string (*Fn)(std::string_view)>
Result<Value> StringFilter(Interpreter&, const Value& subject, Args&) {
  return Value(Fn(subject.Str()));
}

std::string JinjaTitle(std::string_view text) {
  // jinja2's do_title: capitalise each chunk that follows `-`, whitespace or an opening bracket.
  std::string out;
  bool at_word_start = true;
  for (char32_t c : DecodeUtf8(text)) {
    std::string one;
    AppendUtf8(c, &one);
    const bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c);
    if (separator) {
      out += one;
      at_word_start = true;
    } else {
      out += at_word_start ? PyUpper(one) : PyLower(one);
      at_word_start = false;
    }
  }
  return out;
}

Result<Value> FilterTitle(Interpreter&, const Value& subject, Args&) {
  return Value(JinjaTitle(subject.Str()));
}

Result<Value> FilterTrim(Interpreter&, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("trim", args, {{"chars", Value::None()}}));
  std::optional<std::string> chars;
  if (!a[0].is_none()) chars = a[0].Str();
  return Value(PyStrip(subject.Str(), chars, true, true));
}

Result<Value> FilterReplace(Interpreter& interp, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(
      auto a,
      BindArgs("replace", args, {{"old", {}, true}, {"new", {}, true}, {"count", Value::None()}}));
  int64_t count = -1;
  if (!a[2].is_none()) {
    PETREL_ASSIGN_OR_RETURN(count, ToInt(a[2], "count"));
  }
  std::string out = PyReplace(subject.Str(), a[0].Str(), a[1].Str(), count);
  PETREL_RETURN_IF_ERROR(interp.CheckSize(out.size()));
  return Value(std::move(out));
}

Result<Value> FilterDefault(Interpreter&, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(
      auto a, BindArgs("default", args, {{"default_value", Value("")}, {"boolean", Value(false)}}));
  if (subject.is_undefined() || (a[1].Truthy() && !subject.Truthy())) return a[0];
  return subject;
}

Result<Value> FilterToJson(Interpreter&, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("tojson", args,
                                           {{"ensure_ascii", Value(false)},
                                            {"indent", Value::None()},
                                            {"separators", Value::None()},
                                            {"sort_keys", Value(false)}}));
  JsonOptions options;
  options.ensure_ascii = a[0].Truthy();
  if (a[1].is_string()) {
    options.indent_text = a[1].str();
    if (options.indent_text.empty()) options.indent = 0;
  } else if (!a[1].is_none()) {
    PETREL_ASSIGN_OR_RETURN(options.indent, ToInt(a[1], "indent"));
  }
  if (options.indent >= 0 || !options.indent_text.empty()) options.item_separator = ",";
  if (!a[2].is_none()) {
    PETREL_ASSIGN_OR_RETURN(auto parts, Iterate(a[2]));
    if (parts.size() != 2) return Error("ValueError: separators must be a pair of strings");
    options.item_separator = parts[0].Str();
    options.key_separator = parts[1].Str();
  }
  options.sort_keys = a[3].Truthy();
  PETREL_ASSIGN_OR_RETURN(std::string text, ToJson(subject, options));
  return Value(std::move(text));
}

Result<Value> FilterString(Interpreter&, const Value& subject, Args&) {
  return Value(subject.Str());
}

// Python int(text, base) for text; nullopt when it does not parse.
std::optional<int64_t> ParseInt(std::string text, int base) {
  text = PyStrip(text, std::nullopt, true, true);
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, base);
  if (errno || *end != 0) return std::nullopt;
  return int64_t(v);
}

std::optional<double> ParseFloat(const std::string& raw) {
  const std::string text = PyStrip(raw, std::nullopt, true, true);
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (*end != 0) return std::nullopt;
  return v;
}

Result<Value> FilterInt(Interpreter&, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a,
                          BindArgs("int", args, {{"default", Value(0)}, {"base", Value(10)}}));
  if (subject.is_string()) {
    PETREL_ASSIGN_OR_RETURN(int64_t base, ToInt(a[1], "base"));
    if (auto v = ParseInt(subject.str(), int(base))) return Value(*v);
    if (auto f = ParseFloat(subject.str()); f && std::isfinite(*f)) return Value(int64_t(*f));
    return a[0];
  }
  if (subject.is_int() || subject.is_bool()) return Value(subject.int_value());
  if (subject.is_float() && std::isfinite(subject.float_value())) {
    return Value(int64_t(subject.float_value()));
  }
  return a[0];
}

Result<Value> FilterFloat(Interpreter&, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("float", args, {{"default", Value(0.0)}}));
  if (subject.is_number()) return Value(subject.float_value());
  if (subject.is_string()) {
    if (auto f = ParseFloat(subject.str())) return Value(*f);
  }
  return a[0];
}

Result<Value> FilterList(Interpreter&, const Value& subject, Args&) {
  PETREL_ASSIGN_OR_RETURN(auto items, Items(subject));
  return Value::List(std::move(items));
}

Result<Value> FilterItems(Interpreter&, const Value& subject, Args&) {
  if (subject.is_undefined()) return Iterator({});
  if (!subject.is_dict() || subject.dict().is_namespace) {
    return Error("TypeError: Can only get item pairs from a mapping.");
  }
  std::vector<Value> pairs;
  for (const auto& [key, value] : subject.dict().entries) {
    pairs.push_back(Value::List({key, value}, SeqKind::kTuple));
  }
  return Iterator(std::move(pairs));
}

Result<Value> FilterMap(Interpreter& interp, const Value& subject, Args& args) {
  // jinja2 maps and selects only `if value:`, so none and other falsy values give nothing.
  if (!subject.Truthy()) return Iterator({});
  PETREL_ASSIGN_OR_RETURN(auto items, Items(subject));
  std::vector<Value> out;
  out.reserve(items.size());
  PETREL_RETURN_IF_ERROR(interp.Step(items.size()));
  if (args.positional.empty()) {
    Value attribute, fallback;
    for (auto& [key, value] : args.named) {
      if (key == "attribute") {
        attribute = value;
      } else if (key == "default") {
        fallback = value;
      } else {
        return Error("FilterArgumentError: Unexpected keyword argument '%s'", key.c_str());
      }
    }
    if (attribute.is_undefined()) return Error("FilterArgumentError: map requires a filter");
    for (const Value& item : items) {
      Value mapped = ResolvePath(interp, item, attribute);
      if (mapped.is_undefined() && !fallback.is_undefined()) mapped = fallback;
      out.push_back(std::move(mapped));
    }
    return Iterator(std::move(out));
  }
  const std::string filter = args.positional[0].Str();
  for (const Value& item : items) {
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.named = args.named;
    PETREL_ASSIGN_OR_RETURN(Value mapped, interp.ApplyFilter(filter, item, std::move(rest)));
    out.push_back(std::move(mapped));
  }
  return Iterator(std::move(out));
}

// select / reject / selectattr / rejectattr.
template <bool kKeep, bool kAttr>
Result<Value> FilterSelect(Interpreter& interp, const Value& subject, Args& args) {
  if (!subject.Truthy()) return Iterator({});
  PETREL_ASSIGN_OR_RETURN(auto items, Items(subject));
  PETREL_RETURN_IF_ERROR(interp.Step(items.size()));
  size_t next = 0;
  Value attribute;
  if (kAttr) {
    if (args.positional.empty()) return Error("TypeError: missing attribute argument");
    attribute = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) test = args.positional[next++].Str();
  std::vector<Value> out;
  for (const Value& item : items) {
    const Value probe = kAttr ? ResolvePath(interp, item, attribute) : item;
    bool holds;
    if (test.empty()) {
      holds = probe.Truthy();
    } else {
      CallArgs rest;
      rest.positional.assign(args.positional.begin() + long(next), args.positional.end());
      rest.named = args.named;
      PETREL_ASSIGN_OR_RETURN(holds, interp.ApplyTest(test, probe, std::move(rest)));
    }
    if (holds == kKeep) out.push_back(item);
  }
  return Iterator(std::move(out));
}

Result<Value> FilterUnique(Interpreter& interp, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(
      auto a,
      BindArgs("unique", args, {{"case_sensitive", Value(false)}, {"attribute", Value::None()}}));
  PETREL_ASSIGN_OR_RETURN(auto items, Items(subject));
  PETREL_RETURN_IF_ERROR(interp.Step(items.size() * (items.size() + 1) / 2));
  std::vector<Value> seen, out;
  for (const Value& item : items) {
    Value key = Folded(a[1].is_none() ? item : ResolvePath(interp, item, a[1]), a[0].Truthy());
    bool dup = false;
    for (const Value& s : seen) dup = dup || Equals(s, key);
    if (dup) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Iterator(std::move(out));
}

// Stable sort by `keys` with Python ordering; the first comparison error is returned.
Status SortByKeys(std::vector<std::pair<std::vector<Value>, Value>>* rows, bool reverse) {
  Status failure;
  std::stable_sort(rows->begin(), rows->end(), [&](const auto& x, const auto& y) {
    if (!failure.ok()) return false;
    for (size_t i = 0; i < x.first.size(); ++i) {
      Result<int> order = Compare(x.first[i], y.first[i], "<");
      if (!order.ok()) {
        failure = order.status();
        return false;
      }
      if (*order != 0) return reverse ? *order > 0 : *order < 0;
    }
    return false;
  });
  return failure;
}

Result<Value> FilterSort(Interpreter& interp, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("sort", args,
                                           {{"reverse", Value(false)},
                                            {"case_sensitive", Value(false)},
                                            {"attribute", Value::None()}}));
  PETREL_ASSIGN_OR_RETURN(auto items, Items(subject));
  PETREL_RETURN_IF_ERROR(interp.Step(items.size() * 8));
  std::vector<Value> paths;
  if (a[2].is_string()) {
    for (const std::string& part : PySplit(a[2].str(), std::string(","), -1)) {
      paths.push_back(Value(PyStrip(part, std::nullopt, true, true)));
    }
  } else if (!a[2].is_none()) {
    paths.push_back(a[2]);
  }
  std::vector<std::pair<std::vector<Value>, Value>> rows;
  for (const Value& item : items) {
    std::vector<Value> keys;
    if (paths.empty()) keys.push_back(Folded(item, a[1].Truthy()));
    for (const Value& path : paths) {
      keys.push_back(Folded(ResolvePath(interp, item, path), a[1].Truthy()));
    }
    rows.emplace_back(std::move(keys), item);
  }
  PETREL_RETURN_IF_ERROR(SortByKeys(&rows, a[0].Truthy()));
  std::vector<Value> out;
  for (auto& row : rows) out.push_back(std::move(row.second));
  return Value::List(std::move(out));
}

Result<Value> FilterGroupBy(Interpreter& interp, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("groupby", args,
                                           {{"attribute", {}, true},
                                            {"default", Value::None()},
                                            {"case_sensitive", Value(false)}}));
  PETREL_ASSIGN_OR_RETURN(auto items, Items(subject));
  PETREL_RETURN_IF_ERROR(interp.Step(items.size() * 8));
  auto key_of = [&](const Value& item) {
    Value key = ResolvePath(interp, item, a[0]);
    if (key.is_undefined() && !a[1].is_none()) key = a[1];
    return key;
  };
  std::vector<std::pair<std::vector<Value>, Value>> rows;
  for (const Value& item : items) rows.push_back({{Folded(key_of(item), a[2].Truthy())}, item});
  PETREL_RETURN_IF_ERROR(SortByKeys(&rows, false));
  std::vector<Value> groups;
  for (size_t i = 0; i < rows.size();) {
    size_t end = i;
    std::vector<Value> members;
    while (end < rows.size() && Equals(rows[end].first[0], rows[i].first[0])) {
      members.push_back(rows[end++].second);
    }
    groups.push_back(
        Value::List({key_of(rows[i].second), Value::List(std::move(members))}, SeqKind::kTuple));
    i = end;
  }
  return Value::List(std::move(groups));
}

Result<Value> FilterDictSort(Interpreter& interp, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("dictsort", args,
                                           {{"case_sensitive", Value(false)},
                                            {"by", Value("key")},
                                            {"reverse", Value(false)}}));
  if (!subject.is_dict()) return Error("TypeError: dictsort requires a mapping");
  PETREL_RETURN_IF_ERROR(interp.Step(subject.dict().entries.size() * 8));
  const bool by_value = a[1].Str() == "value";
  if (!by_value && a[1].Str() != "key") {
    return Error("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  }
  std::vector<std::pair<std::vector<Value>, Value>> rows;
  for (const auto& [key, value] : subject.dict().entries) {
    rows.push_back({{Folded(by_value ? value : key, a[0].Truthy())},
                    Value::List({key, value}, SeqKind::kTuple)});
  }
  PETREL_RETURN_IF_ERROR(SortByKeys(&rows, a[2].Truthy()));
  std::vector<Value> out;
  for (auto& row : rows) out.push_back(std::move(row.second));
  return Value::List(std::move(out));
}

Result<Value> FilterReverse(Interpreter&, const Value& subject, Args&) {
  if (subject.is_string()) {
    std::u32string code_points = DecodeUtf8(subject.str());
    std::reverse(code_points.begin(), code_points.end());
    return Value(EncodeUtf8(code_points));
  }
  PETREL_ASSIGN_OR_RETURN(auto items, Items(subject));
  std::reverse(items.begin(), items.end());
  if (subject.is_iterator()) return Value::List(std::move(items));
  return Iterator(std::move(items), subject.is_dict() ? "dict_reversekeyiterator"
                                    : subject.is_list() && subject.list().kind == SeqKind::kTuple
                                        ? "reversed"
                                        : "list_reverseiterator");
}

Result<Value> FilterAbs(Interpreter&, const Value& subject, Args&) {
  if (subject.is_float()) return Value(std::fabs(subject.float_value()));
  if (subject.is_int() || subject.is_bool()) {
    if (subject.int_value() == INT64_MIN) return Error("OverflowError: integer result too large");
    return Value(subject.int_value() < 0 ? -subject.int_value() : subject.int_value());
  }
  return Error("TypeError: bad operand type for abs(): '%s'", subject.TypeName());
}

Result<Value> FilterRound(Interpreter&, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(
      auto a, BindArgs("round", args, {{"precision", Value(0)}, {"method", Value("common")}}));
  PETREL_ASSIGN_OR_RETURN(int64_t precision, ToInt(a[0], "precision"));
  const std::string method = a[1].Str();
  if (!subject.is_number()) {
    return Error("TypeError: type %s doesn't define __round__ method", subject.TypeName());
  }
  const double scale = std::pow(10.0, double(precision));
  const double x = subject.float_value() * scale;
  double rounded;
  if (method == "common") {
    if (!subject.is_float()) return Value(subject.int_value());  // Python round(int, n)
    rounded = std::nearbyint(x);  // banker's rounding, like Python's round()
  } else if (method == "floor") {
    rounded = std::floor(x);
  } else if (method == "ceil") {
    rounded = std::ceil(x);
  } else {
    return Error("FilterArgumentError: method must be common, ceil or floor");
  }
  return Value(rounded / scale);
}

Result<Value> FilterSafe(Interpreter&, const Value& subject, Args&) {
  return Value::Markup(subject.Str());
}

template <bool kForce>
Result<Value> FilterEscape(Interpreter&, const Value& subject, Args&) {
  if (!kForce && subject.is_markup()) return subject;
  return Value::Markup(HtmlEscape(subject.Str()));
}

Result<Value> FilterIndent(Interpreter& interp, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(
      auto a, BindArgs("indent", args,
                       {{"width", Value(4)}, {"first", Value(false)}, {"blank", Value(false)}}));
  std::string indentation;
  if (a[0].is_string()) {
    indentation = a[0].str();
  } else {
    PETREL_ASSIGN_OR_RETURN(int64_t width, ToInt(a[0], "width"));
    indentation.assign(size_t(std::clamp<int64_t>(width, 0, 1 << 16)), ' ');
  }
  const std::vector<std::string> lines = PySplitLines(subject.Str() + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    if (i > 0 && (a[2].Truthy() || !lines[i].empty())) out += indentation;
    out += lines[i];
    PETREL_RETURN_IF_ERROR(interp.CheckSize(out.size()));
  }
  if (a[1].Truthy()) out = indentation + out;
  return Value(std::move(out));
}

Result<Value> FilterWordCount(Interpreter&, const Value& subject, Args&) {
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : DecodeUtf8(subject.Str())) {
    const bool word_char = IsPyAlnum(c) || c == '_';
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value(words);
}

Result<Value> FilterBatch(Interpreter&, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(
      auto a, BindArgs("batch", args, {{"linecount", {}, true}, {"fill_with", Value::None()}}));
  PETREL_ASSIGN_OR_RETURN(int64_t size, ToInt(a[0], "linecount"));
  if (size <= 0) return Error("ValueError: batch size must be positive");
  PETREL_ASSIGN_OR_RETURN(auto items, Items(subject));
  std::vector<Value> batches;
  for (size_t i = 0; i < items.size(); i += size_t(size)) {
    std::vector<Value> batch;
    for (size_t k = i; k < i + size_t(size); ++k) {
      if (k < items.size()) {
        batch.push_back(items[k]);
      } else if (!a[1].is_none()) {
        batch.push_back(a[1]);
      }
    }
    batches.push_back(Value::List(std::move(batch)));
  }
  return Iterator(std::move(batches));
}

Result<Value> FilterSum(Interpreter& interp, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(
      auto a, BindArgs("sum", args, {{"attribute", Value::None()}, {"start", Value(0)}}));
  PETREL_ASSIGN_OR_RETURN(auto items, Items(subject));
  Value total = a[1];
  for (const Value& item : items) {
    const Value term = a[0].is_none() ? item : ResolvePath(interp, item, a[0]);
    PETREL_ASSIGN_OR_RETURN(total, BinaryOp(interp, "+", total, term));
  }
  return total;
}

template <bool kMax>
Result<Value> FilterMinMax(Interpreter& interp, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(
      auto a, BindArgs(kMax ? "max" : "min", args,
                       {{"case_sensitive", Value(false)}, {"attribute", Value::None()}}));
  PETREL_ASSIGN_OR_RETURN(auto items, Items(subject));
  if (items.empty()) {
    return Value::Undefined(kMax ? "UndefinedError: No largest item, sequence was empty."
                                 : "UndefinedError: No smallest item, sequence was empty.");
  }
  auto key = [&](const Value& item) {
    return Folded(a[1].is_none() ? item : ResolvePath(interp, item, a[1]), a[0].Truthy());
  };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    PETREL_ASSIGN_OR_RETURN(int order, Compare(key(items[i]), key(items[best]), "<"));
    if (kMax ? order > 0 : order < 0) best = i;
  }
  return items[best];
}

Result<Value> FilterCenter(Interpreter&, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("center", args, {{"width", Value(80)}}));
  PETREL_ASSIGN_OR_RETURN(int64_t width, ToInt(a[0], "width"));
  const std::string text = subject.Str();
  const int64_t length = int64_t(CodePointCount(text));
  if (width <= length) return Value(text);
  width = std::min<int64_t>(width, 1 << 20);
  const int64_t pad = width - length;
  // CPython: left = pad / 2 + (pad & width & 1).
  const int64_t left = pad / 2 + (pad & width & 1);
  return Value(std::string(size_t(left), ' ') + text + std::string(size_t(pad - left), ' '));
}

Result<Value> FilterTruncate(Interpreter&, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("truncate", args,
                                           {{"length", Value(255)},
                                            {"killwords", Value(false)},
                                            {"end", Value("...")},
                                            {"leeway", Value(5)}}));
  PETREL_ASSIGN_OR_RETURN(int64_t length, ToInt(a[0], "length"));
  PETREL_ASSIGN_OR_RETURN(int64_t leeway, ToInt(a[3], "leeway"));
  const std::string end = a[2].Str();
  const std::u32string text = DecodeUtf8(subject.Str());
  const int64_t end_length = int64_t(CodePointCount(end));
  if (length < end_length) return Error("AssertionError: expected length >= len(end)");
  if (int64_t(text.size()) <= length + leeway) return Value(subject.Str());
  std::string head = EncodeUtf8(std::u32string_view(text).substr(0, size_t(length - end_length)));
  if (!a[1].Truthy()) {
    const size_t space = head.rfind(' ');
    if (space != std::string::npos) head.resize(space);
  }
  return Value(head + end);
}

Result<Value> FilterAttr(Interpreter&, const Value& subject, Args& args) {
  PETREL_ASSIGN_OR_RETURN(auto a, BindArgs("attr", args, {{"name", {}, true}}));
  if (std::optional<Value> method = FindMethod(subject, a[0].Str())) return *method;
  return Value::Undefined("UndefinedError: " + std::string(subject.TypeName()) +
                          " object has no attribute " + PyReprString(a[0].Str()));
}

Result<Value> FilterFormat(Interpreter&, const Value& subject, Args& args) {
  if (!args.named.empty()) {
    Value dict = Value::Dict();
    for (auto& [key, value] : args.named) dict.dict().Set(Value(key), value);
    PETREL_ASSIGN_OR_RETURN(std::string text, PercentFormat(subject.Str(), dict));
    return Value(std::move(text));
  }
  PETREL_ASSIGN_OR_RETURN(
      std::string text,
      PercentFormat(subject.Str(), Value::List(args.positional, SeqKind::kTuple)));
  return Value(std::move(text));
}

const std::unordered_map<std::string_view, FilterFn>& FilterTable() {
  static const auto* table = new std::unordered_map<std::string_view, FilterFn>{
      {"abs", FilterAbs},
      {"attr", FilterAttr},
      {"batch", FilterBatch},
      {"capitalize", StringFilter<PyCapitalize>},
      {"center", FilterCenter},
      {"count", FilterLength},
      {"d", FilterDefault},
      {"default", FilterDefault},
      {"dictsort", FilterDictSort},
      {"e", FilterEscape<false>},
      {"escape", FilterEscape<false>},
      {"first", FilterFirst},
      {"float", FilterFloat},
      {"forceescape", FilterEscape<true>},
      {"format", FilterFormat},
      {"groupby", FilterGroupBy},
      {"indent", FilterIndent},
      {"int", FilterInt},
      {"items", FilterItems},
      {"join", FilterJoin},
      {"last", FilterLast},
      {"length", FilterLength},
      {"list", FilterList},
      {"lower", StringFilter<PyLower>},
      {"map", FilterMap},
      {"max", FilterMinMax<true>},
      {"min", FilterMinMax<false>},
      {"reject", FilterSelect<false, false>},
      {"rejectattr", FilterSelect<false, true>},
      {"replace", FilterReplace},
      {"reverse", FilterReverse},
      {"round", FilterRound},
      {"safe", FilterSafe},
      {"select", FilterSelect<true, false>},
      {"selectattr", FilterSelect<true, true>},
      {"sort", FilterSort},
      {"string", FilterString},
      {"sum", FilterSum},
      {"title", FilterTitle},
      {"tojson", FilterToJson},
      {"trim", FilterTrim},
      {"truncate", FilterTruncate},
      {"unique", FilterUnique},
      {"upper", StringFilter<PyUpper>},
      {"wordcount", FilterWordCount},
  };
  return *table;
}

}  // namespace

FilterFn FindFilter(std::string_view name) {
  const auto& table = FilterTable();
  const auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace petrel::chat
