// A model's chat prompt: its template plus BOS/EOS text, rendered from messages and tokenized
// with special tokens parsed (the template writes them as text).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/chat/chat_template.h"
#include "core/base/status.h"

namespace petrel {

class Tokenizer;

class ChatPrompt {
 public:
  // `path`: a GGUF file or Hugging Face folder (see LoadModelChatTemplate).
  static Result<ChatPrompt> Load(const std::string& path);
  // A template file of one's own (no BOS/EOS text).
  static Result<ChatPrompt> LoadFile(const std::string& template_path);
  static Result<ChatPrompt> FromSource(const std::string& source, std::string bos, std::string eos);

  // Renders `messages` (an array of {role, content, …}); `extra` adds template variables such as
  // `tools`.
  Result<std::string> Render(
      const nlohmann::ordered_json& messages, bool add_generation_prompt,
      const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  // The template's Jinja text (the server reads its tool-call and reasoning markers from it).
  const std::string& source() const { return source_; }
  // Render + tokenize. The BOS token is added only when the rendered text does not start with it.
  Result<std::vector<int32_t>> Tokenize(
      const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
      bool add_generation_prompt,
      const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

 private:
  ChatPrompt(ChatTemplate chat_template, std::string source, std::string bos, std::string eos)
      : template_(std::move(chat_template)),
        source_(std::move(source)),
        bos_(std::move(bos)),
        eos_(std::move(eos)) {}
  ChatTemplate template_;
  std::string source_;
  std::string bos_, eos_;
};

}  // namespace petrel
