// GrammarFromRequest: the request fields of the OpenAI and llama.cpp APIs that ask for
// constrained output, mapped to one GBNF grammar.
#include "core/grammar/json_schema.h"

namespace petrel {
namespace {

Result<std::string> FromSchema(const nlohmann::ordered_json& schema, const char* field) {
  if (!schema.is_object() && !schema.is_boolean()) {
    return Error("field '%s' must be a JSON schema object", field);
  }
  auto grammar = JsonSchemaValueToGbnf(schema);
  if (!grammar.ok()) return grammar.status().Wrap(field);
  return grammar;
}

}  // namespace

Result<std::string> GrammarFromRequest(const nlohmann::ordered_json& request) {
  if (!request.is_object()) return std::string();
  std::vector<std::string> given;
  std::string grammar;
  if (auto it = request.find("grammar"); it != request.end() && !it->is_null()) {
    if (!it->is_string()) return Error("field 'grammar' must be a string of GBNF");
    grammar = it->get<std::string>();
    if (!grammar.empty()) given.push_back("grammar");
  }
  if (auto it = request.find("json_schema"); it != request.end() && !it->is_null()) {
    PETREL_ASSIGN_OR_RETURN(grammar, FromSchema(*it, "json_schema"));
    given.push_back("json_schema");
  }
  if (auto it = request.find("response_format"); it != request.end() && !it->is_null()) {
    const nlohmann::ordered_json& format = *it;
    if (!format.is_object() || !format.contains("type") || !format["type"].is_string()) {
      return Error("field 'response_format' must be an object with a string 'type'");
    }
    const std::string type = format["type"].get<std::string>();
    if (type == "json_object") {
      // llama.cpp also takes a schema here.
      if (format.contains("schema") && !format["schema"].is_null()) {
        PETREL_ASSIGN_OR_RETURN(grammar, FromSchema(format["schema"], "response_format.schema"));
      } else {
        grammar = JsonObjectGbnf();
      }
      given.push_back("response_format");
    } else if (type == "json_schema") {
      const auto spec = format.find("json_schema");
      if (spec == format.end() || !spec->is_object() || !spec->contains("schema")) {
        return Error("field 'response_format.json_schema.schema' is missing");
      }
      PETREL_ASSIGN_OR_RETURN(grammar,
                              FromSchema((*spec)["schema"], "response_format.json_schema.schema"));
      given.push_back("response_format");
    } else if (type != "text") {
      return Error("response_format type '%s' is not supported (text, json_object, json_schema)",
                   type.c_str());
    }
  }
  if (given.size() > 1) {
    return Error("fields '%s' and '%s' both constrain the output; give one", given[0].c_str(),
                 given[1].c_str());
  }
  return grammar;
}

}  // namespace petrel
