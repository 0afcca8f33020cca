// Dynamic values with Python semantics (see value.h).
#include "core/chat/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/chat/py_str.h"

namespace petrel::chat {
namespace {

// Containers can only become cyclic through namespaces (`set ns.me = ns`); printing and
// serialising stop at this depth instead of recursing forever.
constexpr int kMaxPrintDepth = 200;

std::string ReprAt(const Value& value, int depth);

std::string ReprItems(const std::vector<Value>& items, int depth) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += ReprAt(items[i], depth + 1);
  }
  return out;
}

std::string ReprAt(const Value& value, int depth) {
  if (depth > kMaxPrintDepth) return "...";
  switch (value.kind()) {
    case ValueKind::kUndefined:
      return "Undefined";
    case ValueKind::kNone:
      return "None";
    case ValueKind::kBool:
      return value.bool_value() ? "True" : "False";
    case ValueKind::kInt:
      return std::to_string(value.int_value());
    case ValueKind::kFloat:
      return PyFloatRepr(value.float_value());
    case ValueKind::kString:
      return PyReprString(value.str());
    case ValueKind::kList: {
      const ListData& list = value.list();
      switch (list.kind) {
        case SeqKind::kList:
          return "[" + ReprItems(list.items, depth) + "]";
        case SeqKind::kTuple:
          return "(" + ReprItems(list.items, depth) + (list.items.size() == 1 ? ",)" : ")");
        case SeqKind::kIterator:
          return "<" + list.type_name + " object>";
      }
      return "";
    }
    case ValueKind::kDict: {
      const DictData& dict = value.dict();
      std::string out = dict.is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict.entries.size(); ++i) {
        if (i) out += ", ";
        out += ReprAt(dict.entries[i].first, depth + 1) + ": " +
               ReprAt(dict.entries[i].second, depth + 1);
      }
      return out + (dict.is_namespace ? "}>" : "}");
    }
    case ValueKind::kFunction:
      return "<function " + value.function().name + ">";
  }
  return "";
}

bool EqualsAt(const Value& a, const Value& b, int depth) {
  if (depth > kMaxPrintDepth) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.float_value() == b.float_value();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kString:
      return a.str() == b.str();
    case ValueKind::kList: {
      const ListData& la = a.list();
      const ListData& lb = b.list();
      if (la.kind == SeqKind::kIterator || la.kind != lb.kind) return &la == &lb;
      if (la.items.size() != lb.items.size()) return false;
      for (size_t i = 0; i < la.items.size(); ++i) {
        if (!EqualsAt(la.items[i], lb.items[i], depth + 1)) return false;
      }
      return true;
    }
    case ValueKind::kDict: {
      const DictData& da = a.dict();
      const DictData& db = b.dict();
      if (da.is_namespace || db.is_namespace) return &da == &db;
      if (da.entries.size() != db.entries.size()) return false;
      for (const auto& [key, item] : da.entries) {
        const Value* other = db.Find(key);
        if (!other || !EqualsAt(item, *other, depth + 1)) return false;
      }
      return true;
    }
    case ValueKind::kFunction:
      return a.identity() == b.identity();
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
      break;
  }
  return false;
}

void AppendJsonString(std::string_view text, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (char32_t c : DecodeUtf8(text)) {
    char buf[16];
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", unsigned(0xD800 + (v >> 10)),
                          unsigned(0xDC00 + (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", unsigned(c));
          }
          *out += buf;
        } else {
          AppendUtf8(c, out);
        }
    }
  }
  out->push_back('"');
}

std::string JsonFloat(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return PyFloatRepr(value);
}

Status JsonAt(const Value& value, const JsonOptions& options, int depth, std::string* out) {
  if (depth > kMaxPrintDepth) return Error("ValueError: Circular reference detected");
  auto newline = [&](int level) {
    if (options.indent < 0 && options.indent_text.empty()) return;
    out->push_back('\n');
    for (int i = 0; i < level; ++i) {
      if (!options.indent_text.empty()) {
        *out += options.indent_text;
      } else {
        out->append(size_t(options.indent), ' ');
      }
    }
  };
  switch (value.kind()) {
    case ValueKind::kNone:
      *out += "null";
      return Status::Ok();
    case ValueKind::kBool:
      *out += value.bool_value() ? "true" : "false";
      return Status::Ok();
    case ValueKind::kInt:
      *out += std::to_string(value.int_value());
      return Status::Ok();
    case ValueKind::kFloat:
      *out += JsonFloat(value.float_value());
      return Status::Ok();
    case ValueKind::kString:
      AppendJsonString(value.str(), options.ensure_ascii, out);
      return Status::Ok();
    case ValueKind::kList: {
      const ListData& list = value.list();
      if (list.kind == SeqKind::kIterator) break;
      if (list.items.empty()) {
        *out += "[]";
        return Status::Ok();
      }
      out->push_back('[');
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i) *out += options.item_separator;
        newline(depth + 1);
        PETREL_RETURN_IF_ERROR(JsonAt(list.items[i], options, depth + 1, out));
      }
      newline(depth);
      out->push_back(']');
      return Status::Ok();
    }
    case ValueKind::kDict: {
      const DictData& dict = value.dict();
      if (dict.is_namespace) break;
      if (dict.entries.empty()) {
        *out += "{}";
        return Status::Ok();
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [key, item] : dict.entries) {
        std::string key_text;
        switch (key.kind()) {
          case ValueKind::kString:
            key_text = key.str();
            break;
          case ValueKind::kInt:
            key_text = std::to_string(key.int_value());
            break;
          case ValueKind::kFloat:
            key_text = JsonFloat(key.float_value());
            break;
          case ValueKind::kBool:
            key_text = key.bool_value() ? "true" : "false";
            break;
          case ValueKind::kNone:
            key_text = "null";
            break;
          case ValueKind::kUndefined:
          case ValueKind::kList:
          case ValueKind::kDict:
          case ValueKind::kFunction:
            return Error("TypeError: keys must be str, int, float, bool or None, not %s",
                         key.TypeName());
        }
        entries.emplace_back(std::move(key_text), &item);
      }
      if (options.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) *out += options.item_separator;
        newline(depth + 1);
        AppendJsonString(entries[i].first, options.ensure_ascii, out);
        *out += options.key_separator;
        PETREL_RETURN_IF_ERROR(JsonAt(*entries[i].second, options, depth + 1, out));
      }
      newline(depth);
      out->push_back('}');
      return Status::Ok();
    }
    case ValueKind::kUndefined:
    case ValueKind::kFunction:
      break;
  }
  return Error("TypeError: Object of type %s is not JSON serializable", value.TypeName());
}

template <typename Json>
Value ValueFromJson(const Json& json) {
  switch (json.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      return Value::None();
    case Json::value_t::boolean:
      return Value(json.template get<bool>());
    case Json::value_t::number_integer:
      return Value(json.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = json.template get<uint64_t>();
      if (u <= uint64_t(INT64_MAX)) return Value(int64_t(u));
      return Value(double(u));
    }
    case Json::value_t::number_float:
      return Value(json.template get<double>());
    case Json::value_t::string:
      return Value(json.template get<std::string>());
    case Json::value_t::binary:
      return Value::None();
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(ValueFromJson(item));
      return Value::List(std::move(items));
    }
    case Json::value_t::object: {
      Value dict = Value::Dict();
      // Keys are unique in a parsed object, so they are appended directly.
      for (const auto& [key, item] : json.items()) {
        dict.dict().entries.emplace_back(Value(key), ValueFromJson(item));
      }
      return dict;
    }
  }
  return Value::None();
}

}  // namespace

namespace {

// Containers whose last owner is being destroyed, waiting to be freed by the outermost
// container destructor, one at a time (see ListData).
thread_local std::vector<std::shared_ptr<void>>* g_pending_release = nullptr;

// Runs `defer_children` (which moves uniquely owned child containers to the pending list), then,
// if no outer destructor is already doing so, frees the pending containers iteratively.
template <typename Fn>
void ReleaseIteratively(Fn defer_children) {
  const bool outermost = g_pending_release == nullptr;
  std::vector<std::shared_ptr<void>> pending;
  if (outermost) g_pending_release = &pending;
  defer_children();
  if (!outermost) return;
  while (!pending.empty()) {
    std::shared_ptr<void> next = std::move(pending.back());
    pending.pop_back();
    next.reset();  // its destructor defers its own children onto `pending`
  }
  g_pending_release = nullptr;
}

}  // namespace

void DeferRelease(Value& value) {
  if (value.list_ && value.list_.use_count() == 1) {
    g_pending_release->push_back(std::move(value.list_));
  }
  if (value.dict_ && value.dict_.use_count() == 1) {
    g_pending_release->push_back(std::move(value.dict_));
  }
}

ListData::~ListData() {
  ReleaseIteratively([this] {
    for (Value& item : items) DeferRelease(item);
  });
}

DictData::~DictData() {
  ReleaseIteratively([this] {
    for (auto& [key, value] : entries) {
      DeferRelease(key);
      DeferRelease(value);
    }
  });
}

const Value* DictData::Find(const Value& key) const {
  if (key.is_string()) return Find(std::string_view(key.str()));
  for (const auto& [k, v] : entries) {
    if (Equals(k, key)) return &v;
  }
  return nullptr;
}

const Value* DictData::Find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

void DictData::Set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (Equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::Undefined(std::string error) {
  Value value;
  value.str_ = std::move(error);
  return value;
}

Value Value::Markup(std::string text) {
  Value value(std::move(text));
  value.bool_ = true;
  return value;
}

Value Value::None() {
  Value value;
  value.kind_ = ValueKind::kNone;
  return value;
}

Value Value::List(std::vector<Value> items, SeqKind kind, std::string type_name) {
  Value value;
  value.kind_ = ValueKind::kList;
  value.list_ = std::make_shared<ListData>();
  value.list_->items = std::move(items);
  value.list_->kind = kind;
  value.list_->type_name = std::move(type_name);
  return value;
}

Value Value::Dict() {
  Value value;
  value.kind_ = ValueKind::kDict;
  value.dict_ = std::make_shared<DictData>();
  return value;
}

Value Value::Namespace() {
  Value value = Dict();
  value.dict_->is_namespace = true;
  return value;
}

Value Value::Function(std::string name, NativeFn fn) {
  Value value;
  value.kind_ = ValueKind::kFunction;
  value.fn_ = std::make_shared<FunctionData>(FunctionData{std::move(name), std::move(fn)});
  return value;
}

Value Value::FromJson(const nlohmann::json& json) { return ValueFromJson(json); }
Value Value::FromJson(const nlohmann::ordered_json& json) { return ValueFromJson(json); }

const void* Value::identity() const {
  switch (kind_) {
    case ValueKind::kList:
      return list_.get();
    case ValueKind::kDict:
      return dict_.get();
    case ValueKind::kFunction:
      return fn_.get();
    case ValueKind::kUndefined:
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kString:
      return nullptr;
  }
  return nullptr;
}

bool Value::Truthy() const {
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
      return bool_;
    case ValueKind::kInt:
      return int_ != 0;
    case ValueKind::kFloat:
      return float_ != 0.0;
    case ValueKind::kString:
      return !str_.empty();
    case ValueKind::kList:
      return list_->kind == SeqKind::kIterator || !list_->items.empty();
    case ValueKind::kDict:
      return dict_->is_namespace || !dict_->entries.empty();
    case ValueKind::kFunction:
      return true;
  }
  return false;
}

std::string Value::Str() const {
  if (kind_ == ValueKind::kString) return str_;
  if (kind_ == ValueKind::kUndefined) return "";
  return Repr();
}

std::string Value::Repr() const { return ReprAt(*this, 0); }

const char* Value::TypeName() const {
  switch (kind_) {
    case ValueKind::kUndefined:
      return "Undefined";
    case ValueKind::kNone:
      return "NoneType";
    case ValueKind::kBool:
      return "bool";
    case ValueKind::kInt:
      return "int";
    case ValueKind::kFloat:
      return "float";
    case ValueKind::kString:
      return "str";
    case ValueKind::kList:
      switch (list_->kind) {
        case SeqKind::kList:
          return "list";
        case SeqKind::kTuple:
          return "tuple";
        case SeqKind::kIterator:
          return list_->type_name.c_str();
      }
      return "list";
    case ValueKind::kDict:
      return dict_->is_namespace ? "Namespace" : "dict";
    case ValueKind::kFunction:
      return "function";
  }
  return "object";
}

std::string UndefinedMessage(const Value& undefined) {
  if (!undefined.undefined_error().empty()) return undefined.undefined_error();
  return "UndefinedError: value is undefined";
}

bool Equals(const Value& a, const Value& b) { return EqualsAt(a, b, 0); }

namespace {
Result<int> CompareAt(const Value& a, const Value& b, const char* op, int depth);
}

Result<int> Compare(const Value& a, const Value& b, const char* op) {
  return CompareAt(a, b, op, 0);
}

namespace {
Result<int> CompareAt(const Value& a, const Value& b, const char* op, int depth) {
  if (depth > kMaxPrintDepth)
    return Error("RecursionError: maximum recursion depth exceeded in comparison");
  if (a.is_undefined()) return ErrorMessage(UndefinedMessage(a));
  if (b.is_undefined()) return ErrorMessage(UndefinedMessage(b));
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.float_value(), y = b.float_value();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const int64_t x = a.int_value(), y = b.int_value();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.list().kind == b.list().kind &&
      a.list().kind != SeqKind::kIterator) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return CompareAt(x[i], y[i], op, depth + 1);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return Error("TypeError: '%s' not supported between instances of '%s' and '%s'", op, a.TypeName(),
               b.TypeName());
}
}  // namespace

Result<std::vector<Value>> Iterate(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kUndefined:
      return std::vector<Value>();
    case ValueKind::kString: {
      std::vector<Value> chars;
      if (IsAscii(value.str())) {
        for (char c : value.str()) chars.emplace_back(std::string(1, c));
      } else {
        for (char32_t c : DecodeUtf8(value.str())) {
          std::string text;
          AppendUtf8(c, &text);
          chars.emplace_back(std::move(text));
        }
      }
      return chars;
    }
    case ValueKind::kList:
      return value.list().items;
    case ValueKind::kDict:
      if (!value.dict().is_namespace) {
        std::vector<Value> keys;
        keys.reserve(value.dict().entries.size());
        for (const auto& entry : value.dict().entries) keys.push_back(entry.first);
        return keys;
      }
      break;
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kFunction:
      break;
  }
  return Error("TypeError: '%s' object is not iterable", value.TypeName());
}

Result<int64_t> Length(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kUndefined:
      return int64_t(0);
    case ValueKind::kString:
      return int64_t(CodePointCount(value.str()));
    case ValueKind::kList:
      if (value.list().kind != SeqKind::kIterator) return int64_t(value.list().items.size());
      break;
    case ValueKind::kDict:
      if (!value.dict().is_namespace) return int64_t(value.dict().entries.size());
      break;
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kFunction:
      break;
  }
  return Error("TypeError: object of type '%s' has no len()", value.TypeName());
}

Result<std::string> ToJson(const Value& value, const JsonOptions& options) {
  std::string out;
  PETREL_RETURN_IF_ERROR(JsonAt(value, options, 0, &out));
  return out;
}

}  // namespace petrel::chat
