// Reading a model's chat template (see model_template.h).
#include "core/chat/model_template.h"

#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/format/gguf.h"

namespace petrel {
namespace {

// What a model without a template needs, for every message that says it has none.
constexpr const char* kGiveTemplate =
    "give one with --chat-template-file FILE (a Jinja chat template, such as the "
    "chat_template.jinja of the model's family)";

bool IsDirectory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool ReadText(const std::string& path, std::string* text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream buffer;
  buffer << in.rdbuf();
  *text = buffer.str();
  return true;
}

// A special token in tokenizer_config.json: a string or an AddedToken object {"content": ...}.
std::string TokenText(const nlohmann::json& token) {
  if (token.is_string()) return token.get<std::string>();
  if (token.is_object() && token.contains("content") && token["content"].is_string()) {
    return token["content"].get<std::string>();
  }
  return "";
}

// `chat_template` is a string, or a list of {"name", "template"} of which "default" is used.
Result<std::string> TemplateFromConfigValue(const nlohmann::json& value, const std::string& where) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    for (const auto& entry : value) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    return Error("%s: chat_template lists no template named \"default\"", where.c_str());
  }
  return Error("%s: chat_template is neither a string nor a list of named templates",
               where.c_str());
}

Result<ModelChatTemplate> FromHuggingFace(const std::string& config_path,
                                          const std::string& folder) {
  ModelChatTemplate result;
  std::string text;
  nlohmann::json config = nlohmann::json::object();
  if (ReadText(config_path, &text)) {
    config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return Error("%s: not a JSON object", config_path.c_str());
    }
    if (config.contains("bos_token")) result.bos_token = TokenText(config["bos_token"]);
    if (config.contains("eos_token")) result.eos_token = TokenText(config["eos_token"]);
  }
  if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    PETREL_ASSIGN_OR_RETURN(result.source,
                            TemplateFromConfigValue(config["chat_template"], config_path));
    return result;
  }
  // Newer transformers save the template beside the config.
  if (!folder.empty()) {
    if (ReadText(folder + "/chat_template.jinja", &result.source)) return result;
    if (ReadText(folder + "/chat_template.json", &text)) {
      const nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
      if (json.is_object() && json.contains("chat_template")) {
        PETREL_ASSIGN_OR_RETURN(
            result.source,
            TemplateFromConfigValue(json["chat_template"], folder + "/chat_template.json"));
        return result;
      }
    }
  }
  return Error("%s: no chat template (tokenizer_config.json has no chat_template); %s",
               (folder.empty() ? config_path : folder).c_str(), kGiveTemplate);
}

std::string GgufTokenText(const GgufFile& file, const char* id_key) {
  const Result<uint64_t> id = file.GetUint(id_key);
  if (!id.ok()) return "";
  const Result<const GgufValue*> tokens = file.GetArray("tokenizer.ggml.tokens", GgufType::kString);
  if (!tokens.ok() || *id >= (*tokens)->strings.size()) return "";
  return std::string((*tokens)->strings[*id]);
}

}  // namespace

Result<ModelChatTemplate> LoadModelChatTemplate(const std::string& path) {
  if (IsDirectory(path)) return FromHuggingFace(path + "/tokenizer_config.json", path);
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    return FromHuggingFace(path, "");
  }
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  ModelChatTemplate result;
  const Result<std::string_view> source = file->GetString("tokenizer.chat_template");
  if (!source.ok())
    return Error("%s: no tokenizer.chat_template in the GGUF metadata; %s", path.c_str(),
                 kGiveTemplate);
  result.source = std::string(*source);
  result.bos_token = GgufTokenText(*file, "tokenizer.ggml.bos_token_id");
  result.eos_token = GgufTokenText(*file, "tokenizer.ggml.eos_token_id");
  return result;
}

}  // namespace petrel
