// BuildPrompt: template rendering and tokenization, with the errors a client can fix as 400s.
#include "server/prompt_builder.h"

namespace petrel::server {

ApiResult BuildPrompt(const CompletionRequest& request, const Tokenizer& tokenizer,
                      const ChatPrompt* chat, size_t n_vocab, std::vector<int32_t>* out) {
  out->clear();
  switch (request.endpoint) {
    case Endpoint::kChat: {
      if (!chat) {
        return StatusError(400,
                           "the model has no chat template (start the server with "
                           "--chat-template-file, or use /v1/completions)");
      }
      // As transformers' apply_chat_template: `tools` is always defined (none when absent).
      nlohmann::ordered_json extra = {{"tools", request.tools}};
      if (!request.tool_choice.is_null()) extra["tool_choice"] = request.tool_choice;
      if (!request.reasoning_effort.empty()) extra["reasoning_effort"] = request.reasoning_effort;
      auto ids = chat->Tokenize(tokenizer, request.messages, /*add_generation_prompt=*/true, extra);
      if (!ids.ok()) {
        return InvalidField("messages",
                            "the chat template failed on these messages: " + ids.status().message(),
                            "template_error");
      }
      *out = std::move(ids).value();
      break;
    }
    case Endpoint::kCompletion: {
      if (request.prompt_is_ids) {
        for (int32_t id : request.prompt_ids) {
          if (size_t(id) >= n_vocab) {
            return InvalidField("prompt", "'prompt' token id " + std::to_string(id) +
                                              " is outside the vocabulary of " +
                                              std::to_string(n_vocab));
          }
        }
        *out = request.prompt_ids;
      } else {
        EncodeOptions encode;
        encode.add_special = true;
        *out = tokenizer.Encode(request.prompt_text, encode);
      }
      break;
    }
  }
  if (out->empty()) {
    return InvalidField(request.endpoint == Endpoint::kChat ? "messages" : "prompt",
                        "the prompt has no tokens");
  }
  return std::nullopt;
}

}  // namespace petrel::server
