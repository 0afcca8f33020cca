// Building blocks of the JSON Schema converter (internal): the JSON primitive rules, integer
// ranges as digit patterns, and regular expressions as GBNF over JSON-escaped strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"

namespace petrel {

// (name, body) of ws, char, string, number, integer, boolean, null, value, object, array.
const std::vector<std::pair<const char*, const char*>>& JsonPrimitiveRules();

// A GBNF expression (no trailing whitespace) for the decimal integers in [min, max]; either
// bound may be absent. Bounds must lie within +-10^18.
Result<std::string> IntegerRangeGbnf(std::optional<int64_t> min, std::optional<int64_t> max);

// A GBNF expression for the *JSON-encoded* contents (between the quotes) of strings that the
// regular expression `pattern` matches, for a subset of ECMA-262 syntax: literals, escapes
// (\d \w \s and escaped punctuation), classes, `.`, groups, `|`, and * + ? {m} {m,} {m,n}.
// Anchors ^ and $ only at the ends; without them the pattern may match inside the string.
// `max_count` bounds the repetition counts.
Result<std::string> RegexToGbnf(std::string_view pattern, size_t max_count);

// `text` as a GBNF literal: "..." with quotes, backslashes and control characters escaped.
std::string GbnfLiteral(std::string_view text);

}  // namespace petrel
