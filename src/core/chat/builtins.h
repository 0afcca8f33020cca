// The built-in library: filters, tests, global functions and the methods of str, dict and list,
// with jinja2 3.1 / Python semantics and the immutable sandbox's refusals.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/chat/value.h"
#include "core/base/status.h"

namespace petrel::chat {

class Interpreter;

using FilterFn = Result<Value> (*)(Interpreter&, const Value& subject, CallArgs& args);
using TestFn = Result<bool> (*)(Interpreter&, const Value& subject, CallArgs& args);

// Null when there is no such filter / test.
FilterFn FindFilter(std::string_view name);
TestFn FindTest(std::string_view name);
// `range`, `namespace`, `dict`, `raise_exception`, `strftime_now`, `joiner`, `cycler`; undefined
// otherwise.
Value FindGlobal(std::string_view name);
// A method of `object` bound to it; an undefined value raising SecurityError for methods that
// mutate (the sandbox is immutable); nullopt when the type has no such attribute.
std::optional<Value> FindMethod(const Value& object, const std::string& name);

// One parameter of a native function, Python style.
struct Param {
  const char* name;
  Value default_value;
  bool required = false;
};
// Binds positional and keyword arguments to `params`, in order; errors name `function`.
Result<std::vector<Value>> BindArgs(const char* function, CallArgs& args,
                                    std::initializer_list<Param> params);

// Python-style `%` formatting (`"%s and %d" % (a, b)`), used by `%` and the `format` filter.
Result<std::string> PercentFormat(const std::string& format, const Value& args);
// `str.format(*args, **kwargs)`.
Result<std::string> BraceFormat(Interpreter& interp, const std::string& format, CallArgs& args);
// Integer / float argument helpers with Python's TypeError messages.
Result<int64_t> ToInt(const Value& value, const char* what);

}  // namespace petrel::chat
