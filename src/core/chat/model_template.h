// Finds a model's chat template and its BOS/EOS token text: `tokenizer.chat_template` in a GGUF
// file, or `chat_template` in a Hugging Face folder's tokenizer_config.json (or its
// chat_template.jinja / chat_template.json).
#pragma once

#include <string>

#include "core/base/status.h"

namespace petrel {

struct ModelChatTemplate {
  std::string source;     // the Jinja text
  std::string bos_token;  // empty when the model names none
  std::string eos_token;
};

// `path` is a GGUF file, a Hugging Face folder, or a tokenizer_config.json file.
Result<ModelChatTemplate> LoadModelChatTemplate(const std::string& path);

}  // namespace petrel
