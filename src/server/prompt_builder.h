// The prompt tokens of a request: chat messages rendered through the chat template (with
// `tools` and `tool_choice`), or a completion prompt's text or token ids.
#pragma once

#include <cstdint>
#include <vector>

#include "core/chat/chat_prompt.h"
#include "core/tokenizer/tokenizer.h"
#include "server/completion_request.h"

namespace petrel::server {

// `chat` may be null (the model has no template): chat requests are then refused. Text prompts
// get the BOS token as `petrel run` gives it.
ApiResult BuildPrompt(const CompletionRequest& request, const Tokenizer& tokenizer,
                      const ChatPrompt* chat, size_t n_vocab, std::vector<int32_t>* out);

}  // namespace petrel::server
