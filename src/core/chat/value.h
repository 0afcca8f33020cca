// Dynamic values of the template language, with Python semantics: truthiness, str(), repr(),
// ==, ordering, iteration and json.dumps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace petrel::chat {

class Interpreter;
class Value;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};

// A native function or a bound method or a macro; it gets the interpreter for callbacks (filters
// that call tests, macros that render).
using NativeFn = std::function<Result<Value>(Interpreter&, CallArgs&)>;

enum class ValueKind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kFunction,
};

// Lists double as tuples and as one-shot iterators (`map`, `select`, `reverse` results), which
// print and serialise differently but iterate alike.
enum class SeqKind : uint8_t { kList, kTuple, kIterator };

// Containers free their nested containers iteratively, so that dropping a deeply nested value
// (a template can build one a million levels deep) cannot exhaust the stack.
struct ListData {
  ListData() = default;
  ListData(const ListData&) = delete;
  ListData& operator=(const ListData&) = delete;
  ~ListData();

  std::vector<Value> items;
  SeqKind kind = SeqKind::kList;
  std::string type_name;  // for iterators: "generator", "list_reverseiterator", ...
};

// Keys in insertion order, like a Python dict. Lookups are linear: template dicts are small.
struct DictData {
  DictData() = default;
  DictData(const DictData&) = delete;
  DictData& operator=(const DictData&) = delete;
  ~DictData();

  std::vector<std::pair<Value, Value>> entries;
  bool is_namespace = false;  // `namespace()`: attributes assignable with `set ns.x = ...`

  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  void Set(Value key, Value value);
};

struct FunctionData {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  Value() = default;                                                               // undefined
  Value(bool value) : kind_(ValueKind::kBool), bool_(value) {}                     // NOLINT
  Value(int64_t value) : kind_(ValueKind::kInt), int_(value) {}                    // NOLINT
  Value(int value) : kind_(ValueKind::kInt), int_(value) {}                        // NOLINT
  Value(double value) : kind_(ValueKind::kFloat), float_(value) {}                 // NOLINT
  Value(std::string value) : kind_(ValueKind::kString), str_(std::move(value)) {}  // NOLINT
  Value(std::string_view value) : kind_(ValueKind::kString), str_(value) {}        // NOLINT
  Value(const char* value) : kind_(ValueKind::kString), str_(value) {}             // NOLINT

  // `error` is the full message raised when the value is used ("UndefinedError: 'x' is
  // undefined"); empty means the generic one.
  static Value Undefined(std::string error = {});
  // A string marked safe (jinja2's Markup, from `|safe` and `|escape`): `+` with a plain string
  // HTML-escapes the plain side, as MarkupSafe does.
  static Value Markup(std::string text);
  static Value None();
  static Value List(std::vector<Value> items, SeqKind kind = SeqKind::kList,
                    std::string type_name = {});
  static Value Dict();
  static Value Namespace();
  static Value Function(std::string name, NativeFn fn);
  // JSON objects keep their order with `ordered_json`; `json` has already sorted its keys.
  static Value FromJson(const nlohmann::json& json);
  static Value FromJson(const nlohmann::ordered_json& json);

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_bool() const { return kind_ == ValueKind::kBool; }
  bool is_int() const { return kind_ == ValueKind::kInt; }
  bool is_float() const { return kind_ == ValueKind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_list() const { return kind_ == ValueKind::kList; }
  bool is_dict() const { return kind_ == ValueKind::kDict; }
  bool is_function() const { return kind_ == ValueKind::kFunction; }
  bool is_iterator() const { return is_list() && list_->kind == SeqKind::kIterator; }

  bool bool_value() const { return bool_; }
  bool is_markup() const { return is_string() && bool_; }
  int64_t int_value() const { return is_bool() ? int64_t(bool_) : int_; }
  double float_value() const { return is_float() ? float_ : double(int_value()); }
  const std::string& str() const { return str_; }
  const std::string& undefined_error() const { return str_; }
  ListData& list() const { return *list_; }
  DictData& dict() const { return *dict_; }
  const FunctionData& function() const { return *fn_; }
  const std::shared_ptr<DictData>& dict_ptr() const { return dict_; }
  // Identity for `is sameas` on containers.
  const void* identity() const;

  bool Truthy() const;
  std::string Str() const;       // Python str()
  std::string Repr() const;      // Python repr()
  const char* TypeName() const;  // Python type name: "NoneType", "str", "dict", ...

 private:
  friend void DeferRelease(Value& value);

  ValueKind kind_ = ValueKind::kUndefined;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0.0;
  std::string str_;  // string payload, or an undefined value's error
  std::shared_ptr<ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<FunctionData> fn_;
};

// Internal to the container destructors: moves `value`'s container to the pending list if this
// is its last owner.
void DeferRelease(Value& value);

// The message an undefined value raises when used.
std::string UndefinedMessage(const Value& undefined);

// Python ==.
bool Equals(const Value& a, const Value& b);
// Python ordering: <0, 0, >0, or a TypeError for `op` ("<") between unorderable types.
Result<int> Compare(const Value& a, const Value& b, const char* op);
// iter(value) materialised: list/tuple items, dict keys, string code points, nothing for
// undefined; a TypeError otherwise.
Result<std::vector<Value>> Iterate(const Value& value);
// len(value), or a TypeError.
Result<int64_t> Length(const Value& value);

// json.dumps with Python's arguments: `indent` < 0 is None; separators as given or the defaults.
struct JsonOptions {
  bool ensure_ascii = false;
  int64_t indent = -1;
  std::string indent_text;  // used when indent is given as a string
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
Result<std::string> ToJson(const Value& value, const JsonOptions& options);

}  // namespace petrel::chat
