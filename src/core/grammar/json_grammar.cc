// The grammar of any JSON value: the primitives the schema converter builds on, and the
// `json_object` response format.
#include <string>

#include "core/grammar/json_schema.h"
#include "core/grammar/json_schema_rules.h"

namespace petrel {

const std::vector<std::pair<const char*, const char*>>& JsonPrimitiveRules() {
  // Whitespace is bounded so that a model cannot stall in it; each value rule takes the
  // whitespace after it. Numbers have at most 16 digits per part for the same reason.
  static const std::vector<std::pair<const char*, const char*>> rules = {
      {"ws", R"(| " " | "\n" [ \t]{0,20})"},
      {"char", R"([^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
      {"string", R"("\"" char* "\"" ws)"},
      {"number",
       R"("-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,16})? ws)"},
      {"integer", R"("-"? ("0" | [1-9] [0-9]{0,15}) ws)"},
      {"boolean", R"(("true" | "false") ws)"},
      {"null", R"("null" ws)"},
      {"value", R"(object | array | string | number | boolean | null)"},
      {"object", R"("{" ws (string ":" ws value ("," ws string ":" ws value)*)? "}" ws)"},
      {"array", R"("[" ws (value ("," ws value)*)? "]" ws)"},
  };
  return rules;
}

namespace {

std::string AllPrimitives(const char* root) {
  std::string text = std::string("root ::= ") + root + "\n";
  for (const auto& [name, body] : JsonPrimitiveRules()) {
    text += std::string(name) + " ::= " + body + "\n";
  }
  return text;
}

}  // namespace

std::string JsonValueGbnf() { return AllPrimitives("value"); }
std::string JsonObjectGbnf() { return AllPrimitives("object"); }

}  // namespace petrel
