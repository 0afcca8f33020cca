// JSON Schema to GBNF: one rule per subschema, named after its place in the schema; `$ref`s
// become rules that are reserved before their target is converted, so recursive schemas give
// recursive rules instead of endless expansion.
#include "core/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "core/grammar/json_schema_rules.h"

namespace petrel {
namespace {

using Json = nlohmann::ordered_json;

constexpr size_t kMaxPrefixItems = 1000;

// Nesting depth of a JSON value, without recursion (dump() of a deeper value would recurse).
size_t JsonDepth(const Json& value) {
  size_t deepest = 0;
  std::vector<std::pair<const Json*, size_t>> pending = {{&value, 1}};
  while (!pending.empty()) {
    auto [node, depth] = pending.back();
    pending.pop_back();
    deepest = std::max(deepest, depth);
    if (node->is_structured()) {
      for (const auto& child : *node) pending.push_back({&child, depth + 1});
    }
  }
  return deepest;
}

const std::set<std::string>& AnnotationKeywords() {
  static const std::set<std::string> keywords = {
      "$schema",  "$id",        "$comment", "title",     "description", "default",
      "examples", "deprecated", "readOnly", "writeOnly", "$defs",       "definitions"};
  return keywords;
}

const std::set<std::string>& ConstraintKeywords() {
  static const std::set<std::string> keywords = {"type",
                                                 "properties",
                                                 "required",
                                                 "additionalProperties",
                                                 "enum",
                                                 "const",
                                                 "items",
                                                 "prefixItems",
                                                 "minItems",
                                                 "maxItems",
                                                 "$ref",
                                                 "anyOf",
                                                 "oneOf",
                                                 "allOf",
                                                 "minLength",
                                                 "maxLength",
                                                 "pattern",
                                                 "format",
                                                 "minimum",
                                                 "maximum",
                                                 "exclusiveMinimum",
                                                 "exclusiveMaximum"};
  return keywords;
}

std::string EscapePointer(const std::string& key) {
  std::string out;
  for (char ch : key) {
    if (ch == '~') {
      out += "~0";
    } else if (ch == '/') {
      out += "~1";
    } else {
      out += ch;
    }
  }
  return out;
}

std::string RuleNameFrom(const std::string& hint) {
  std::string name;
  for (char ch : hint) {
    const bool ok =
        (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    name += ok ? ch : '-';
  }
  if (name.empty()) name = "item";
  if (name.size() > 48) name.resize(48);
  return name;
}

// Formats as grammars of the string's contents.
const std::map<std::string, std::string>& FormatRules() {
  static const std::map<std::string, std::string> formats = {
      {"date", R"([0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]))"},
      {"time",
       R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
      {"date-time",
       R"([0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) "T" ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
      {"uuid",
       R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
      {"email", R"([a-zA-Z0-9._%+-]{1,64} "@" [a-zA-Z0-9-]{1,63} ("." [a-zA-Z0-9-]{1,63}){1,4})"},
  };
  return formats;
}

class SchemaConverter {
 public:
  SchemaConverter(const Json& root, const JsonSchemaLimits& limits)
      : root_(root), limits_(limits) {}

  Result<std::string> Convert() {
    PETREL_ASSIGN_OR_RETURN(const std::string root_expr, Visit(root_, "root", "", 0));
    rules_["root"] = root_expr;
    std::string text;
    // root first, then the rest by name: the output is deterministic.
    text += "root ::= " + rules_["root"] + "\n";
    for (const auto& [name, body] : rules_) {
      if (name != "root") text += name + " ::= " + body + "\n";
    }
    for (const auto& [name, body] : JsonPrimitiveRules()) {
      if (used_primitives_.count(name)) text += std::string(name) + " ::= " + body + "\n";
    }
    return text;
  }

 private:
  Status Fail(const std::string& pointer, const std::string& what) const {
    return ErrorMessage("json schema: " + what + " at " + (pointer.empty() ? "/" : pointer));
  }

  std::string Primitive(const std::string& name) {
    used_primitives_.insert(name);
    // Their dependencies.
    if (name == "string") used_primitives_.insert("char");
    if (name == "value" || name == "object" || name == "array") {
      for (const char* p :
           {"value", "object", "array", "string", "char", "number", "boolean", "null"}) {
        used_primitives_.insert(p);
      }
    }
    used_primitives_.insert("ws");
    return name;
  }

  Result<std::string> NewRule(const std::string& hint, const std::string& pointer) {
    if (rules_.size() >= limits_.max_rules) {
      return Fail(pointer,
                  "the schema needs more than " + std::to_string(limits_.max_rules) + " rules");
    }
    std::string base = RuleNameFrom(hint);
    // Names of primitives and root stay theirs.
    std::string name = base;
    for (size_t n = 1; rules_.count(name) || name == "root" ||
                       std::any_of(JsonPrimitiveRules().begin(), JsonPrimitiveRules().end(),
                                   [&](const auto& p) { return name == p.first; });
         ++n) {
      name = base + "-" + std::to_string(n);
    }
    rules_[name] = "";
    return name;
  }

  Result<std::string> AddRule(const std::string& hint, const std::string& body,
                              const std::string& pointer) {
    PETREL_ASSIGN_OR_RETURN(std::string name, NewRule(hint, pointer));
    rules_[name] = body;
    return name;
  }

  Result<const Json*> ResolvePointer(const std::string& ref, const std::string& pointer) {
    if (ref.empty() || ref[0] != '#') {
      return Fail(pointer,
                  "$ref '" + ref + "' is not local (only \"#...\" references are supported)");
    }
    const Json* node = &root_;
    std::string path = ref.substr(1);
    size_t pos = 0;
    while (pos < path.size()) {
      if (path[pos] != '/') return Fail(pointer, "$ref '" + ref + "' is not a JSON pointer");
      size_t next = path.find('/', pos + 1);
      if (next == std::string::npos) next = path.size();
      std::string key = path.substr(pos + 1, next - pos - 1);
      std::string unescaped;
      for (size_t i = 0; i < key.size(); ++i) {
        if (key[i] == '~' && i + 1 < key.size() && (key[i + 1] == '0' || key[i + 1] == '1')) {
          unescaped += key[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          unescaped += key[i];
        }
      }
      if (node->is_object() && node->contains(unescaped)) {
        node = &(*node)[unescaped];
      } else if (node->is_array() && !unescaped.empty() &&
                 unescaped.find_first_not_of("0123456789") == std::string::npos &&
                 unescaped.size() < 10 && std::stoul(unescaped) < node->size()) {
        node = &(*node)[std::stoul(unescaped)];
      } else {
        return Fail(pointer, "$ref '" + ref + "' does not resolve");
      }
      pos = next;
    }
    return node;
  }

  Result<std::string> Ref(const Json& schema, const std::string& pointer, size_t depth) {
    if (!schema["$ref"].is_string()) return Fail(pointer, "$ref must be a string");
    for (const auto& [key, value] : schema.items()) {
      if (key != "$ref" && !AnnotationKeywords().count(key)) {
        return Fail(pointer, "'" + key + "' beside $ref is not supported");
      }
    }
    const std::string ref = schema["$ref"].get<std::string>();
    if (auto it = ref_rules_.find(ref); it != ref_rules_.end()) return it->second;
    // Follow pure aliases ($ref to a $ref) to find cycles that no character would break.
    std::set<std::string> seen = {ref};
    PETREL_ASSIGN_OR_RETURN(const Json* target, ResolvePointer(ref, pointer));
    while (target->is_object() && target->contains("$ref") && (*target)["$ref"].is_string()) {
      const std::string next = (*target)["$ref"].get<std::string>();
      if (!seen.insert(next).second) return Fail(pointer, "$ref cycle through '" + next + "'");
      PETREL_ASSIGN_OR_RETURN(target, ResolvePointer(next, pointer));
    }
    const size_t slash = ref.find_last_of('/');
    PETREL_ASSIGN_OR_RETURN(
        const std::string name,
        NewRule(slash == std::string::npos ? "ref" : ref.substr(slash + 1), pointer));
    ref_rules_[ref] = name;
    PETREL_ASSIGN_OR_RETURN(const std::string body, Visit(*target, name, ref.substr(1), depth + 1));
    rules_[name] = body;
    return name;
  }

  Result<std::string> Visit(const Json& schema, const std::string& name, const std::string& pointer,
                            size_t depth) {
    if (depth > limits_.max_depth) {
      return Fail(pointer, "schemas nested deeper than " + std::to_string(limits_.max_depth));
    }
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) return Fail(pointer, "schema 'false' matches nothing");
      return Primitive("value");
    }
    if (!schema.is_object()) return Fail(pointer, "a schema must be an object or a boolean");
    for (const auto& [key, value] : schema.items()) {
      if (!AnnotationKeywords().count(key) && !ConstraintKeywords().count(key)) {
        return Fail(pointer, "unsupported keyword '" + key + "'");
      }
    }
    if (schema.contains("$ref")) return Ref(schema, pointer, depth);
    for (const char* key : {"const", "enum"}) {
      if (schema.contains(key) && JsonDepth(schema[key]) > limits_.max_depth) {
        return Fail(pointer + "/" + key, std::string(key) + " value nested too deeply");
      }
    }
    if (schema.contains("const")) {
      Primitive("ws");
      return GbnfLiteral(schema["const"].dump()) + " ws";
    }
    if (schema.contains("enum")) {
      const Json& values = schema["enum"];
      if (!values.is_array() || values.empty())
        return Fail(pointer + "/enum", "enum must be a non-empty array");
      std::vector<std::string> parts;
      for (const Json& value : values) parts.push_back(GbnfLiteral(value.dump()));
      Primitive("ws");
      return "(" + Join(parts) + ") ws";
    }
    for (const char* combinator : {"anyOf", "oneOf"}) {
      if (!schema.contains(combinator)) continue;
      // oneOf is converted as anyOf: a grammar cannot exclude a value that matches two branches.
      const Json& branches = schema[combinator];
      if (!branches.is_array() || branches.empty()) {
        return Fail(pointer + "/" + combinator,
                    std::string(combinator) + " must be a non-empty array");
      }
      for (const auto& [key, value] : schema.items()) {
        if (key != combinator && !AnnotationKeywords().count(key) && key != "type") {
          return Fail(pointer, "'" + key + "' beside " + combinator + " is not supported");
        }
      }
      std::vector<std::string> parts;
      for (size_t i = 0; i < branches.size(); ++i) {
        const std::string at = pointer + "/" + combinator + "/" + std::to_string(i);
        PETREL_ASSIGN_OR_RETURN(std::string expr,
                                Visit(branches[i], name + "-" + std::to_string(i), at, depth + 1));
        PETREL_ASSIGN_OR_RETURN(std::string rule,
                                AddRule(name + "-" + std::to_string(i), expr, at));
        parts.push_back(rule);
      }
      return "(" + Join(parts) + ")";
    }
    if (schema.contains("allOf")) return AllOf(schema, name, pointer, depth);
    return Typed(schema, name, pointer, depth);
  }

  static std::string Join(const std::vector<std::string>& parts, const char* separator = " | ") {
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i) out += separator;
      out += parts[i];
    }
    return out;
  }

  // allOf of object schemas (directly or through $ref): their properties and required lists
  // merged into one object.
  Result<std::string> AllOf(const Json& schema, const std::string& name, const std::string& pointer,
                            size_t depth) {
    const Json& parts = schema["allOf"];
    if (!parts.is_array() || parts.empty())
      return Fail(pointer + "/allOf", "allOf must be a non-empty array");
    Json merged = Json::object();
    merged["type"] = "object";
    merged["properties"] = Json::object();
    merged["required"] = Json::array();
    std::vector<const Json*> all;
    Json own = schema;
    own.erase("allOf");
    all.push_back(&own);
    for (const Json& part : parts) all.push_back(&part);
    for (size_t i = 0; i < all.size(); ++i) {
      const Json* part = all[i];
      const std::string at = i == 0 ? pointer : pointer + "/allOf/" + std::to_string(i - 1);
      std::set<std::string> seen;
      while (part->is_object() && part->contains("$ref")) {
        const std::string ref =
            (*part)["$ref"].is_string() ? (*part)["$ref"].get<std::string>() : "";
        if (!seen.insert(ref).second) return Fail(at, "$ref cycle through '" + ref + "'");
        PETREL_ASSIGN_OR_RETURN(part, ResolvePointer(ref, at));
      }
      if (!part->is_object()) return Fail(at, "allOf: only object schemas can be combined");
      for (const auto& [key, value] : part->items()) {
        if (AnnotationKeywords().count(key)) continue;
        if (key == "type") {
          if (value != "object") return Fail(at, "allOf: only object schemas can be combined");
        } else if (key == "properties") {
          if (!value.is_object()) return Fail(at + "/properties", "properties must be an object");
          for (const auto& [prop, sub] : value.items()) merged["properties"][prop] = sub;
        } else if (key == "required") {
          if (!value.is_array()) return Fail(at + "/required", "required must be an array");
          for (const Json& r : value) merged["required"].push_back(r);
        } else if (key == "additionalProperties") {
          merged["additionalProperties"] = value;
        } else {
          return Fail(at,
                      "allOf: '" + key +
                          "' cannot be combined (only properties, required, additionalProperties)");
        }
      }
    }
    return Typed(merged, name, pointer, depth);
  }

  Result<std::string> Typed(const Json& schema, const std::string& name, const std::string& pointer,
                            size_t depth) {
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& type = schema["type"];
      if (type.is_string()) {
        types.push_back(type.get<std::string>());
      } else if (type.is_array() && !type.empty()) {
        for (const Json& t : type) {
          if (!t.is_string())
            return Fail(pointer + "/type", "type must be a string or an array of strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        return Fail(pointer + "/type", "type must be a string or an array of strings");
      }
    } else {
      auto has = [&](std::initializer_list<const char*> keys) {
        return std::any_of(keys.begin(), keys.end(),
                           [&](const char* k) { return schema.contains(k); });
      };
      if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (has({"items", "prefixItems", "minItems", "maxItems"})) types.push_back("array");
      if (has({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
      if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
        types.push_back("number");
      if (types.empty()) return Primitive("value");
    }
    std::vector<std::string> parts;
    for (const std::string& type : types) {
      PETREL_ASSIGN_OR_RETURN(
          std::string part,
          OneType(schema, type, types.size() > 1 ? name + "-" + type : name, pointer, depth));
      parts.push_back(part);
    }
    return parts.size() == 1 ? parts[0] : "(" + Join(parts) + ")";
  }

  Result<size_t> Count(const Json& schema, const char* key, const std::string& pointer) {
    const Json& value = schema[key];
    if (!value.is_number_integer() || value.get<int64_t>() < 0) {
      return Fail(pointer + "/" + key, std::string(key) + " must be a non-negative integer");
    }
    if (value.get<uint64_t>() > limits_.max_count) {
      return Fail(pointer + "/" + key, std::string(key) + " " + value.dump() +
                                           " exceeds the limit of " +
                                           std::to_string(limits_.max_count));
    }
    return size_t(value.get<uint64_t>());
  }

  Result<std::string> OneType(const Json& schema, const std::string& type, const std::string& name,
                              const std::string& pointer, size_t depth) {
    if (type == "null" || type == "boolean") return Primitive(type);
    if (type == "string") return String(schema, pointer);
    if (type == "integer") return Integer(schema, pointer);
    if (type == "number") return Number(schema, pointer);
    if (type == "object") return Object(schema, name, pointer, depth);
    if (type == "array") return Array(schema, name, pointer, depth);
    return Fail(pointer + "/type", "unknown type '" + type + "'");
  }

  Result<std::string> String(const Json& schema, const std::string& pointer) {
    Primitive("string");
    const bool lengths = schema.contains("minLength") || schema.contains("maxLength");
    if (schema.contains("format")) {
      if (!schema["format"].is_string())
        return Fail(pointer + "/format", "format must be a string");
      const std::string format = schema["format"].get<std::string>();
      auto it = FormatRules().find(format);
      if (it == FormatRules().end())
        return Fail(pointer + "/format", "unsupported format '" + format + "'");
      if (lengths || schema.contains("pattern")) {
        return Fail(pointer, "format together with pattern or lengths is not supported");
      }
      return "\"\\\"\" " + it->second + " \"\\\"\" ws";
    }
    if (schema.contains("pattern")) {
      if (!schema["pattern"].is_string())
        return Fail(pointer + "/pattern", "pattern must be a string");
      if (lengths)
        return Fail(pointer, "pattern together with minLength/maxLength is not supported");
      auto body = RegexToGbnf(schema["pattern"].get<std::string>(), limits_.max_count);
      if (!body.ok()) return Fail(pointer + "/pattern", body.status().message());
      return "\"\\\"\" " + *body + " \"\\\"\" ws";
    }
    if (!lengths) return std::string("string");
    size_t min = 0;
    if (schema.contains("minLength")) {
      PETREL_ASSIGN_OR_RETURN(min, Count(schema, "minLength", pointer));
    }
    std::string repeat = "{" + std::to_string(min) + ",";
    if (schema.contains("maxLength")) {
      PETREL_ASSIGN_OR_RETURN(const size_t max, Count(schema, "maxLength", pointer));
      if (max < min) return Fail(pointer, "maxLength is below minLength");
      repeat += std::to_string(max);
    }
    return "\"\\\"\" char" + repeat + "} \"\\\"\" ws";
  }

  // The integer bounds of minimum/maximum/exclusive*: for integers, rounded inwards.
  Result<std::string> Integer(const Json& schema, const std::string& pointer) {
    std::optional<int64_t> min, max;
    auto bound = [&](const char* key, bool lower, bool exclusive) -> Status {
      if (!schema.contains(key)) return Status::Ok();
      const Json& value = schema[key];
      if (!value.is_number())
        return Fail(pointer + "/" + key, std::string(key) + " must be a number");
      const double v = value.get<double>();
      if (!(std::fabs(v) <= 1e18))
        return Fail(pointer + "/" + key, std::string(key) + " is out of range");
      int64_t b = lower ? int64_t(std::ceil(v)) : int64_t(std::floor(v));
      if (exclusive && double(b) == v) b += lower ? 1 : -1;
      auto& slot = lower ? min : max;
      slot = slot ? (lower ? std::max(*slot, b) : std::min(*slot, b)) : b;
      return Status::Ok();
    };
    PETREL_RETURN_IF_ERROR(bound("minimum", true, false));
    PETREL_RETURN_IF_ERROR(bound("exclusiveMinimum", true, true));
    PETREL_RETURN_IF_ERROR(bound("maximum", false, false));
    PETREL_RETURN_IF_ERROR(bound("exclusiveMaximum", false, true));
    if (!min && !max) return Primitive("integer");
    Primitive("ws");
    auto range = IntegerRangeGbnf(min, max);
    if (!range.ok()) return Fail(pointer, range.status().message());
    return *range + " ws";
  }

  Result<std::string> Number(const Json& schema, const std::string& pointer) {
    const bool bounded = schema.contains("minimum") || schema.contains("maximum") ||
                         schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum");
    if (!bounded) return Primitive("number");
    // A grammar states the sign, not a value: minimum 0 alone is what it can say of a number.
    if (schema.contains("minimum") && schema["minimum"] == 0 && !schema.contains("maximum") &&
        !schema.contains("exclusiveMinimum") && !schema.contains("exclusiveMaximum")) {
      Primitive("ws");
      return std::string(
          R"(("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,16})? ws)");
    }
    return Fail(
        pointer,
        "bounds on a number are not supported (only minimum 0; use type integer for ranges)");
  }

  Result<std::string> Object(const Json& schema, const std::string& name,
                             const std::string& pointer, size_t depth) {
    Primitive("ws");
    Json properties = schema.contains("properties") ? schema["properties"] : Json::object();
    if (!properties.is_object())
      return Fail(pointer + "/properties", "properties must be an object");
    std::vector<std::string> required_names;
    if (schema.contains("required")) {
      const Json& required = schema["required"];
      if (!required.is_array())
        return Fail(pointer + "/required", "required must be an array of names");
      for (const Json& r : required) {
        if (!r.is_string())
          return Fail(pointer + "/required", "required must be an array of names");
        const std::string key = r.get<std::string>();
        if (std::find(required_names.begin(), required_names.end(), key) == required_names.end()) {
          required_names.push_back(key);
        }
        if (!properties.contains(key)) properties[key] = true;  // required, any value
      }
    }
    std::vector<std::string> required_kvs, optional_kvs;
    for (const auto& [key, sub] : properties.items()) {
      const std::string at = pointer + "/properties/" + EscapePointer(key);
      PETREL_ASSIGN_OR_RETURN(std::string value, Visit(sub, name + "-" + key, at, depth + 1));
      PETREL_ASSIGN_OR_RETURN(std::string kv,
                              AddRule(name + "-" + key + "-kv",
                                      GbnfLiteral(Json(key).dump()) + " ws \":\" ws " + value, at));
      const bool is_required =
          std::find(required_names.begin(), required_names.end(), key) != required_names.end();
      (is_required ? required_kvs : optional_kvs).push_back(kv);
    }
    if (optional_kvs.size() > limits_.max_optional_properties) {
      return Fail(pointer, "more than " + std::to_string(limits_.max_optional_properties) +
                               " optional properties");
    }
    // Additional properties: absent or true allows any; a schema constrains their values.
    std::string extra_kv;
    const Json additional =
        schema.contains("additionalProperties") ? schema["additionalProperties"] : Json(true);
    if (!(additional.is_boolean() && !additional.get<bool>())) {
      std::string value = "value";
      if (additional.is_boolean()) {
        Primitive("value");
      } else {
        PETREL_ASSIGN_OR_RETURN(value, Visit(additional, name + "-additional",
                                             pointer + "/additionalProperties", depth + 1));
      }
      Primitive("string");
      PETREL_ASSIGN_OR_RETURN(
          extra_kv, AddRule(name + "-additional-kv", "string \":\" ws " + value, pointer));
    }
    // Optional members in their order, each possibly absent, then any additional ones:
    // tail(i) follows optional member i (i = -1: the required ones) and is ("," next)*.
    std::string extra_rest;
    if (!extra_kv.empty()) {
      PETREL_ASSIGN_OR_RETURN(extra_rest, NewRule(name + "-additional-rest", pointer));
      rules_[extra_rest] = "\",\" ws " + extra_kv + " " + extra_rest + " | ";
    }
    std::vector<std::string> tails(optional_kvs.size());
    for (size_t i = 0; i < optional_kvs.size(); ++i) {
      PETREL_ASSIGN_OR_RETURN(tails[i], NewRule(name + "-rest-" + std::to_string(i), pointer));
    }
    auto tail_body = [&](size_t first) {
      std::vector<std::string> alternatives;
      for (size_t j = first; j < optional_kvs.size(); ++j) {
        alternatives.push_back("\",\" ws " + optional_kvs[j] + " " + tails[j]);
      }
      if (!extra_kv.empty()) alternatives.push_back("\",\" ws " + extra_kv + " " + extra_rest);
      alternatives.push_back("");
      return Join(alternatives);
    };
    for (size_t i = 0; i < optional_kvs.size(); ++i) rules_[tails[i]] = tail_body(i + 1);
    std::string body;
    if (!required_kvs.empty()) {
      body = Join(required_kvs, " \",\" ws ");
      if (!optional_kvs.empty() || !extra_kv.empty()) {
        PETREL_ASSIGN_OR_RETURN(std::string rest, AddRule(name + "-rest", tail_body(0), pointer));
        body += " " + rest;
      }
    } else {
      std::vector<std::string> starts;
      for (size_t j = 0; j < optional_kvs.size(); ++j)
        starts.push_back(optional_kvs[j] + " " + tails[j]);
      if (!extra_kv.empty()) starts.push_back(extra_kv + " " + extra_rest);
      if (!starts.empty()) body = "(" + Join(starts) + ")?";
    }
    return "\"{\" ws " + body + " \"}\" ws";
  }

  Result<std::string> Array(const Json& schema, const std::string& name, const std::string& pointer,
                            size_t depth) {
    Primitive("ws");
    size_t min = 0;
    std::optional<size_t> max;
    if (schema.contains("minItems")) {
      PETREL_ASSIGN_OR_RETURN(min, Count(schema, "minItems", pointer));
    }
    if (schema.contains("maxItems")) {
      PETREL_ASSIGN_OR_RETURN(const size_t m, Count(schema, "maxItems", pointer));
      max = m;
      if (m < min) return Fail(pointer, "maxItems is below minItems");
    }
    std::vector<std::string> prefix;
    if (schema.contains("prefixItems")) {
      const Json& items = schema["prefixItems"];
      if (!items.is_array()) return Fail(pointer + "/prefixItems", "prefixItems must be an array");
      if (items.size() > kMaxPrefixItems) {
        return Fail(pointer + "/prefixItems",
                    "more than " + std::to_string(kMaxPrefixItems) + " prefixItems");
      }
      for (size_t i = 0; i < items.size(); ++i) {
        const std::string at = pointer + "/prefixItems/" + std::to_string(i);
        PETREL_ASSIGN_OR_RETURN(std::string expr,
                                Visit(items[i], name + "-" + std::to_string(i), at, depth + 1));
        PETREL_ASSIGN_OR_RETURN(std::string rule,
                                AddRule(name + "-" + std::to_string(i), expr, at));
        prefix.push_back(rule);
      }
    }
    std::string item;  // empty: no items past the prefix
    if (!schema.contains("items") || schema["items"] == true) {
      item = Primitive("value");
    } else if (schema["items"] == false) {
      if (min > prefix.size())
        return Fail(pointer, "minItems exceeds prefixItems with items false");
    } else if (schema["items"].is_array()) {
      return Fail(pointer + "/items", "items as an array is not supported (use prefixItems)");
    } else {
      PETREL_ASSIGN_OR_RETURN(
          std::string expr, Visit(schema["items"], name + "-item", pointer + "/items", depth + 1));
      PETREL_ASSIGN_OR_RETURN(item, AddRule(name + "-item", expr, pointer + "/items"));
    }
    if (max) {
      const size_t limit = item.empty() ? prefix.size() : *max;
      max = std::min(*max, limit);
    } else if (item.empty()) {
      max = prefix.size();
    }
    if (min > (max ? *max : min)) return Fail(pointer, "minItems cannot be met");
    // tail(i): what follows the i-th element (i >= 1), built from the last prefix item back
    // to the first (no recursion, whatever the length of prefixItems).
    auto tail_after_prefix = [&](size_t i) -> std::string {
      if ((max && i >= *max) || item.empty()) return "";
      const size_t more_min = min > i ? min - i : 0;
      std::string repeat = "{" + std::to_string(more_min) + ",";
      if (max) repeat += std::to_string(*max - i);
      return "(\",\" ws " + item + ")" + repeat + "}";
    };
    std::string tail = tail_after_prefix(std::max<size_t>(prefix.size(), 1));
    for (size_t i = prefix.size(); i-- > 1;) {
      if (max && i >= *max) {
        tail.clear();
        continue;
      }
      const std::string next = "\",\" ws " + prefix[i] + " " + tail;
      tail = i >= min ? "(" + next + ")?" : next;
    }
    if (max && *max == 0) return std::string("\"[\" ws \"]\" ws");
    const std::string first = prefix.empty() ? item : prefix[0];
    std::string elements = first + " " + tail;
    if (min == 0) elements = "(" + elements + ")?";
    return "\"[\" ws " + elements + " \"]\" ws";
  }

  const Json& root_;
  JsonSchemaLimits limits_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;
  std::set<std::string> used_primitives_;
};

}  // namespace

Result<std::string> JsonSchemaValueToGbnf(const nlohmann::ordered_json& schema,
                                          const JsonSchemaLimits& limits) {
  return SchemaConverter(schema, limits).Convert();
}

Result<std::string> JsonSchemaToGbnf(std::string_view text, const JsonSchemaLimits& limits) {
  Json schema = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return Error("json schema: not valid JSON");
  return JsonSchemaValueToGbnf(schema, limits);
}

}  // namespace petrel
