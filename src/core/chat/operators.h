// Python operators on template values: arithmetic, `~`, `in`, slicing.
#pragma once

#include <string_view>

#include "core/chat/value.h"
#include "core/base/status.h"

namespace petrel::chat {

class Interpreter;

// `op` is one of + - * / // % ** ~.
Result<Value> BinaryOp(Interpreter& interp, std::string_view op, const Value& left,
                       const Value& right);
// `op` is "-" or "+".
Result<Value> UnaryOp(std::string_view op, const Value& operand);
// `item in container`.
Result<bool> Contains(const Value& container, const Value& item);
// container[start:stop:step]; the bounds are none (omitted) or integers.
Result<Value> Slice(const Value& container, const Value& start, const Value& stop,
                    const Value& step);

}  // namespace petrel::chat
