// The C API's chat calls: petrel_chat_apply_template renders messages with a template, and
// petrel_generate_chat tokenizes them as `petrel run --chat` does (ChatPrompt::Tokenize: the
// template's control tokens parsed, the messages' text kept as text) and generates the reply,
// keeping the KV rows of the prefix the context already holds.
#include <algorithm>
#include <optional>
#include <string_view>

#include "capi/capi_errors.h"
#include "capi/context_calls.h"
#include "capi/handles.h"
#include "capi/live_handles.h"
#include "core/chat/chat_prompt.h"
#include "core/tokenizer/unicode.h"  // tok::FirstInvalidUtf8

namespace petrel::capi {
namespace {

// The template to render with: the caller's source, else the model's own (read once).
Result<const ChatPrompt*> ChooseTemplate(const petrel_model* model, const char* source,
                                         std::optional<ChatPrompt>* parsed) {
  if (source) {
    auto chat = ChatPrompt::FromSource(source, "", "");
    if (!chat.ok()) return chat.status().Wrap("template_source");
    parsed->emplace(std::move(chat).value());
    return &**parsed;
  }
  std::lock_guard<std::mutex> lock(model->chat_mutex);
  if (!model->chat_read) {
    auto chat = ChatPrompt::Load(model->path);
    if (chat.ok()) {
      model->chat.emplace(std::move(chat).value());
    } else {
      model->chat_error = chat.status().message();
    }
    model->chat_read = true;
  }
  if (!model->chat) return Error("the model has no chat template (%s)", model->chat_error.c_str());
  return &*model->chat;
}

// The messages as the template reads them, each role and content checked to be UTF-8.
petrel_status ToJson(const petrel_chat_message* messages, size_t n_messages, const char* function,
                     nlohmann::ordered_json* out) {
  if (!messages && n_messages > 0) {
    return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: messages is NULL", function);
  }
  *out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < n_messages; ++i) {
    const char* fields[2] = {messages[i].role, messages[i].content};
    const char* names[2] = {"role", "content"};
    for (int f = 0; f < 2; ++f) {
      if (!fields[f]) {
        return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: messages[%zu].%s is NULL", function, i,
                     names[f]);
      }
      const std::string_view text(fields[f]);
      if (const size_t bad = tok::FirstInvalidUtf8(text); bad != std::string_view::npos) {
        return FailF(PETREL_ERR_INVALID_ARGUMENT,
                     "%s: messages[%zu].%s is not valid UTF-8 at byte offset %zu", function, i,
                     names[f], bad);
      }
    }
    out->push_back({{"role", messages[i].role}, {"content", messages[i].content}});
  }
  return PETREL_OK;
}

// A template the caller gave that does not parse or render is a bad argument; the model's
// own missing is a state of the model.
petrel_status TemplateError(const Status& status, const char* source, const char* function) {
  return FailF(source ? PETREL_ERR_INVALID_ARGUMENT : PETREL_ERR_STATE, "%s: %s", function,
               status.message().c_str());
}

}  // namespace
}  // namespace petrel::capi

using petrel::capi::Fail;
using petrel::capi::FailF;
using petrel::capi::Guard;

extern "C" {

petrel_status petrel_chat_apply_template(const petrel_model* model, const char* template_source,
                                         const petrel_chat_message* messages, size_t n_messages,
                                         int add_generation_prompt, char* out, size_t cap,
                                         size_t* len_out) {
  constexpr const char* kFunction = "petrel_chat_apply_template";
  return Guard(kFunction, [&]() -> petrel_status {
    if (petrel_status status = petrel::capi::CheckModel(model, kFunction)) return status;
    if (!len_out) return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: len_out is NULL", kFunction);
    *len_out = 0;
    if (!out && cap > 0) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: out is NULL but cap is not 0", kFunction);
    }
    nlohmann::ordered_json json;
    if (petrel_status status = petrel::capi::ToJson(messages, n_messages, kFunction, &json)) {
      return status;
    }
    std::optional<petrel::ChatPrompt> parsed;
    auto chat = petrel::capi::ChooseTemplate(model, template_source, &parsed);
    if (!chat.ok()) return petrel::capi::TemplateError(chat.status(), template_source, kFunction);
    auto text = (*chat)->Render(json, add_generation_prompt != 0);
    if (!text.ok()) return petrel::capi::TemplateError(text.status(), template_source, kFunction);
    *len_out = text->size();
    if (text->size() >= cap) {
      return FailF(PETREL_ERR_BUFFER_TOO_SMALL, "%s: %zu bytes and the NUL do not fit %zu",
                   kFunction, text->size(), cap);
    }
    std::memcpy(out, text->data(), text->size());
    out[text->size()] = '\0';
    return PETREL_OK;
  });
}

petrel_status petrel_generate_chat(petrel_context* ctx, const char* template_source,
                                   const petrel_chat_message* messages, size_t n_messages,
                                   const petrel_sampling_params* params,
                                   petrel_token_callback callback, void* user_data,
                                   petrel_generate_result* result) {
  constexpr const char* kFunction = "petrel_generate_chat";
  return Guard(kFunction, [&]() -> petrel_status {
    petrel_generate_result outcome = {sizeof(petrel_generate_result), 0, 0, PETREL_STOP_NONE};
    petrel::capi::WriteSized(outcome, result);
    if (petrel_status status = petrel::capi::CheckContext(ctx, kFunction)) return status;
    if (!callback) return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: callback is NULL", kFunction);
    if (n_messages == 0) return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: no messages", kFunction);
    petrel_sampling_params given;
    if (petrel_status status = petrel::capi::ReadParams(params, petrel_sampling_default_params(),
                                                        "petrel_sampling_params", &given)) {
      return status;
    }
    nlohmann::ordered_json json;
    if (petrel_status status = petrel::capi::ToJson(messages, n_messages, kFunction, &json)) {
      return status;
    }
    petrel::capi::BusyScope busy(ctx);
    if (!busy.taken()) return petrel::capi::RefuseBusy(kFunction);
    std::optional<petrel::ChatPrompt> parsed;
    auto chat = petrel::capi::ChooseTemplate(ctx->model, template_source, &parsed);
    if (!chat.ok()) return petrel::capi::TemplateError(chat.status(), template_source, kFunction);
    auto ids = (*chat)->Tokenize(*ctx->engine->tokenizer(), json, /*add_generation_prompt=*/true);
    if (!ids.ok()) return petrel::capi::TemplateError(ids.status(), template_source, kFunction);
    if (ids->empty()) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: the template renders no tokens", kFunction);
    }

    // Keep the rows of the longest prefix the context holds (a sampled token not fed yet is
    // not in the cache, so it cannot be kept), feed the rest. At least one token is fed, so
    // that there are logits to sample from.
    const std::vector<int32_t>& held = ctx->held;
    size_t keep =
        std::mismatch(held.begin(), held.end(), ids->begin(), ids->end()).first - held.begin();
    keep = std::min(keep, ids->size() - 1);
    if (petrel::Status status = ctx->engine->TruncateSequence(ctx->seq, keep); !status.ok()) {
      return FailF(PETREL_ERR_BACKEND, "%s: %s", kFunction, status.message().c_str());
    }
    ctx->held.resize(keep);
    ctx->pending = -1;
    std::vector<int32_t> rest(ids->begin() + ptrdiff_t(keep), ids->end());
    // The reply is a text of its own: its first piece is decoded as a text's first (no
    // leading space), whether or not the conversation before it was cached.
    return petrel::capi::GenerateTokens(ctx, std::move(rest), /*first=*/true, given, callback,
                                        user_data, result, kFunction);
  });
}

}  // extern "C"
