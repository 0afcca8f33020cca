// JSON Schema to GBNF: the grammar of the JSON texts a schema accepts, for the keywords a
// grammar can enforce (docs/GRAMMARS.md lists them). Any other keyword is an error naming it
// and its JSON pointer, so a schema is never silently weakened.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace petrel {

struct JsonSchemaLimits {
  size_t max_depth = 64;     // nested subschemas
  size_t max_rules = 10000;  // rules of the resulting grammar
  size_t max_count = 10000;  // minItems/maxItems/minLength/maxLength a grammar spells out
  size_t max_optional_properties = 64;  // optional properties of one object (rules grow as n^2)
};

// `schema` is parsed as JSON keeping the order of properties, which is the order the grammar
// emits them in (required ones first). Errors begin "json schema: ".
Result<std::string> JsonSchemaToGbnf(std::string_view schema, const JsonSchemaLimits& limits = {});
Result<std::string> JsonSchemaValueToGbnf(const nlohmann::ordered_json& schema,
                                          const JsonSchemaLimits& limits = {});

// The grammar a completion request asks for, from its fields `grammar` (GBNF text),
// `json_schema` (a schema) or `response_format` ({"type": "text"}, {"type": "json_object"} or
// {"type": "json_schema", "json_schema": {"schema": {...}, "strict": true}}); "" when none.
// More than one of them, or a malformed one, is an error naming the field.
Result<std::string> GrammarFromRequest(const nlohmann::ordered_json& request);

// Any JSON value, and any JSON object (OpenAI's `json_object` response format).
std::string JsonValueGbnf();
std::string JsonObjectGbnf();

}  // namespace petrel
