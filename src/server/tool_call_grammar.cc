// ToolCallGrammar: each allowed function's call object as a JSON schema, converted to GBNF, under
// a root rule spelling the format's wrapper.
#include "server/tool_call_grammar.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "core/grammar/json_schema.h"

namespace petrel::server {
namespace {

using json = nlohmann::ordered_json;

constexpr size_t kMaxTools = 128;
// Deeper parameter schemas are refused before the chat template (which walks them recursively)
// or the grammar converter sees them.
constexpr size_t kMaxSchemaDepth = 64;

// Nesting depth of a JSON value, without recursion.
size_t JsonDepth(const json& value) {
  size_t deepest = 0;
  std::vector<std::pair<const json*, size_t>> pending = {{&value, 1}};
  while (!pending.empty()) {
    auto [node, depth] = pending.back();
    pending.pop_back();
    deepest = std::max(deepest, depth);
    if (depth > kMaxSchemaDepth) break;
    if (node->is_structured()) {
      for (const json& child : *node) pending.push_back({&child, depth + 1});
    }
  }
  return deepest;
}

// The shape every tool's `parameters` must have, whether or not a grammar is made from it:
// templates read `properties`, `required` and `type` without checking them. An error message,
// or "" when the schema is well formed.
std::string CheckParameters(const json& parameters, const std::string& where) {
  if (!parameters.is_object()) return "'" + where + "' must be a JSON schema object";
  if (JsonDepth(parameters) > kMaxSchemaDepth) {
    return "'" + where + "' is nested deeper than " + std::to_string(kMaxSchemaDepth) + " levels";
  }
  if (auto type = parameters.find("type"); type != parameters.end()) {
    bool ok = type->is_string();
    if (type->is_array()) {
      ok = std::all_of(type->begin(), type->end(), [](const json& t) { return t.is_string(); });
    }
    if (!ok) return "'" + where + ".type' must be a string or an array of strings";
  }
  if (auto properties = parameters.find("properties"); properties != parameters.end()) {
    if (!properties->is_object()) return "'" + where + ".properties' must be an object";
    for (const auto& [name, schema] : properties->items()) {
      if (!schema.is_object() && !schema.is_boolean()) {
        return "'" + where + ".properties." + name + "' must be a JSON schema object";
      }
    }
  }
  if (auto required = parameters.find("required"); required != parameters.end()) {
    if (!required->is_array() || !std::all_of(required->begin(), required->end(),
                                              [](const json& name) { return name.is_string(); })) {
      return "'" + where + ".required' must be an array of property names";
    }
  }
  return "";
}

const json* FunctionOf(const json& tool) {
  if (!tool.is_object()) return nullptr;
  auto function = tool.find("function");
  if (function == tool.end() || !function->is_object()) return nullptr;
  auto name = function->find("name");
  if (name == function->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
    return nullptr;
  return &*function;
}

// Renames rules in GBNF text: every identifier outside string literals, character classes and
// comments becomes rename(identifier).
template <typename Rename>
std::string RenameRules(const std::string& gbnf, Rename rename) {
  std::string out;
  auto ident = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  };
  for (size_t i = 0; i < gbnf.size();) {
    const char c = gbnf[i];
    if (c == '"' || c == '[') {
      const char end = c == '"' ? '"' : ']';
      size_t j = i + 1;
      while (j < gbnf.size() && gbnf[j] != end) j += gbnf[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, gbnf.size());
      out.append(gbnf, i, j - i);
      i = j;
    } else if (c == '#') {
      const size_t j = gbnf.find('\n', i);
      const size_t stop = j == std::string::npos ? gbnf.size() : j;
      out.append(gbnf, i, stop - i);
      i = stop;
    } else if (ident(c)) {
      size_t j = i;
      while (j < gbnf.size() && ident(gbnf[j])) ++j;
      const std::string word = gbnf.substr(i, j - i);
      // Repetition counts ({2,5}) are numbers, not rule names.
      out += std::isdigit(static_cast<unsigned char>(word[0])) ? word : rename(word);
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

// The schema of one call object: {"name": <const>, <key>: <parameters>}.
json CallSchema(const json& function, const char* arguments_key) {
  json parameters = function.contains("parameters") && function["parameters"].is_object()
                        ? function["parameters"]
                        : json{{"type", "object"}};
  return json{
      {"type", "object"},
      {"properties", {{"name", {{"const", function["name"]}}}, {arguments_key, parameters}}},
      {"required", {"name", arguments_key}},
      {"additionalProperties", false}};
}

std::string Literal(const std::string& text) { return json(text).dump(); }

// Rewrites every local "$ref": "#/…" in `schema` to "`at`/…", for a schema moved from a
// document's root to the pointer `at` (its depth is bounded by CheckParameters).
void RebaseRefs(json* schema, const std::string& at) {
  if (schema->is_object()) {
    for (auto& [name, value] : schema->items()) {
      if (name == "$ref" && value.is_string() && value.get_ref<const std::string&>()[0] == '#') {
        value = at + value.get<std::string>().substr(1);
      } else {
        RebaseRefs(&value, at);
      }
    }
  } else if (schema->is_array()) {
    for (json& value : *schema) RebaseRefs(&value, at);
  }
}

std::string RenameRule(const std::string& gbnf, const std::string& from, const std::string& to) {
  return RenameRules(gbnf, [&](const std::string& word) { return word == from ? to : word; });
}

// Harmony: one call ends the turn (its <|call|> marker stops generation), so the reply is one
// commentary message to one of the functions, its header spelled out (in ordinary tokens: the
// markers' own special tokens have no text the grammar could match) and the body the function's
// parameters. Each function's rules get a prefix of their own.
Result<std::string> HarmonyCallGrammar(const std::vector<const json*>& functions) {
  std::string root = "root ::= ", rules;
  for (size_t i = 0; i < functions.size(); ++i) {
    const json& function = *functions[i];
    const json parameters = function.contains("parameters") && function["parameters"].is_object()
                                ? function["parameters"]
                                : json{{"type", "object"}};
    auto gbnf = JsonSchemaValueToGbnf(parameters);
    if (!gbnf.ok()) return gbnf.status().Wrap("tools");
    const std::string prefix = "fn" + std::to_string(i) + "-";
    rules += RenameRules(*gbnf, [&](const std::string& word) { return prefix + word; });
    if (i > 0) root += " | ";
    root += Literal("<|channel|>commentary to=functions." + function["name"].get<std::string>() +
                    " <|constrain|>json<|message|>") +
            " " + prefix + "root";
  }
  return root + "\n" + rules;
}

}  // namespace

ApiResult ReadToolChoice(const json& tools, const json& tool_choice, ToolChoice* out) {
  *out = ToolChoice();
  if (!tools.is_null()) {
    if (tools.size() > kMaxTools) {
      return InvalidField("tools",
                          "'tools' has more than " + std::to_string(kMaxTools) + " functions");
    }
    for (size_t i = 0; i < tools.size(); ++i) {
      const json* function = FunctionOf(tools[i]);
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!function || tools[i].value("type", std::string("function")) != "function") {
        return InvalidField(where,
                            "'" + where +
                                "' must be {\"type\": \"function\", \"function\": "
                                "{\"name\": …, \"parameters\": {…}}}",
                            "invalid_type");
      }
      if (function->contains("parameters")) {
        const std::string at = where + ".function.parameters";
        if (std::string error = CheckParameters((*function)["parameters"], at); !error.empty()) {
          return InvalidField(at, error, "invalid_type");
        }
      }
    }
  }
  const bool has_tools = tools.is_array() && !tools.empty();
  if (tool_choice.is_null()) {
    out->mode = has_tools ? ToolChoice::Mode::kAuto : ToolChoice::Mode::kNone;
    return std::nullopt;
  }
  if (tool_choice.is_string()) {
    const std::string& mode = tool_choice.get_ref<const std::string&>();
    if (mode == "none") {
      out->mode = ToolChoice::Mode::kNone;
    } else if (mode == "auto") {
      out->mode = has_tools ? ToolChoice::Mode::kAuto : ToolChoice::Mode::kNone;
    } else if (mode == "required") {
      if (!has_tools) {
        return InvalidField("tool_choice", "'tool_choice' \"required\" needs 'tools'");
      }
      out->mode = ToolChoice::Mode::kRequired;
    } else {
      return InvalidField("tool_choice",
                          "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                          "{\"type\": \"function\", \"function\": {\"name\": …}}");
    }
    return std::nullopt;
  }
  const json* function = FunctionOf(tool_choice);
  if (!function) {
    return InvalidField("tool_choice",
                        "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                        "{\"type\": \"function\", \"function\": {\"name\": …}}");
  }
  out->mode = ToolChoice::Mode::kNamed;
  out->name = (*function)["name"].get<std::string>();
  if (has_tools) {
    for (const json& tool : tools) {
      if ((*FunctionOf(tool))["name"] == out->name) return std::nullopt;
    }
  }
  return InvalidField("tool_choice",
                      "'tool_choice' names function '" + out->name + "', which is not in 'tools'");
}

Result<std::string> ToolCallGrammar(ToolCallFormat format, const json& tools,
                                    const ToolChoice& choice, bool parallel) {
  const char* key = format == ToolCallFormat::kLlama3 ? "parameters" : "arguments";
  json alternatives = json::array();
  std::vector<const json*> functions;
  for (const json& tool : tools) {
    const json* function = FunctionOf(tool);
    if (!function) continue;
    if (choice.mode == ToolChoice::Mode::kNamed && (*function)["name"] != choice.name) continue;
    alternatives.push_back(CallSchema(*function, key));
    functions.push_back(function);
  }
  if (alternatives.empty()) return Error("no function to call");
  if (format == ToolCallFormat::kHarmony) return HarmonyCallGrammar(functions);
  // Each function's local $refs point into its own parameters, which now sit deeper.
  for (size_t i = 0; i < alternatives.size(); ++i) {
    const std::string at =
        (alternatives.size() == 1 ? "#" : "#/anyOf/" + std::to_string(i)) + "/properties/" + key;
    RebaseRefs(&alternatives[i]["properties"][key], at);
  }
  const json schema = alternatives.size() == 1 ? alternatives[0] : json{{"anyOf", alternatives}};
  auto gbnf = JsonSchemaValueToGbnf(schema);
  if (!gbnf.ok()) return gbnf.status().Wrap("tools");
  std::string rules = RenameRule(*gbnf, "root", "tool-call-json");
  std::string call, separator, open, close;
  switch (format) {
    case ToolCallFormat::kHermes:
      call = Literal("<tool_call>\n") + " tool-call-json " + Literal("\n</tool_call>");
      separator = Literal("\n");
      break;
    case ToolCallFormat::kLlama3:
      call = "tool-call-json";
      separator = Literal("; ");
      break;
    case ToolCallFormat::kMistral:
      // The [TOOL_CALLS] marker is a control token: the bare array is what the parser also reads.
      call = "tool-call-json";
      separator = Literal(", ");
      open = Literal("[");
      close = Literal("]");
      break;
    case ToolCallFormat::kGeneric:
    case ToolCallFormat::kHarmony:  // handled above
      call = "tool-call-json";
      separator = Literal(", ");
      open = Literal("{\"tool_calls\": [");
      close = Literal("]}");
      break;
  }
  std::string root = "root ::= " + open + " " + call;
  if (parallel) root += " (" + separator + " " + call + ")*";
  root += " " + close + "\n";
  return root + rules;
}

}  // namespace petrel::server
