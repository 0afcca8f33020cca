// The C API's sessions: petrel_context_save/load over the session files of `petrel chat`'s
// /save and /load (SaveSession: the tokens, the KV rows and the model's fingerprint). The
// metadata records the sampled token not fed yet, so a loaded context resumes exactly.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "capi/capi_errors.h"
#include "capi/context_calls.h"
#include "capi/handles.h"
#include "capi/live_handles.h"
#include "core/generation/session_file.h"

using petrel::capi::Fail;
using petrel::capi::FailF;
using petrel::capi::Guard;

extern "C" {

petrel_status petrel_context_save(petrel_context* ctx, const char* path) {
  constexpr const char* kFunction = "petrel_context_save";
  return Guard(kFunction, [&]() -> petrel_status {
    if (petrel_status status = petrel::capi::CheckContext(ctx, kFunction)) return status;
    if (!path || !*path) return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: no path given", kFunction);
    petrel::capi::BusyScope busy(ctx);
    if (!busy.taken()) return petrel::capi::RefuseBusy(kFunction);
    const nlohmann::json metadata = {{"petrel_capi", 1}, {"pending", ctx->pending}};
    if (petrel::Status status =
            petrel::SaveSession(*ctx->engine, ctx->seq, ctx->held, metadata.dump(), path);
        !status.ok()) {
      return FailF(PETREL_ERR_IO, "%s: %s", kFunction, status.message().c_str());
    }
    return PETREL_OK;
  });
}

petrel_status petrel_context_load(petrel_context* ctx, const char* path) {
  constexpr const char* kFunction = "petrel_context_load";
  return Guard(kFunction, [&]() -> petrel_status {
    if (petrel_status status = petrel::capi::CheckContext(ctx, kFunction)) return status;
    if (!path || !*path) return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: no path given", kFunction);
    petrel::capi::BusyScope busy(ctx);
    if (!busy.taken()) return petrel::capi::RefuseBusy(kFunction);
    // Whatever happens, the context no longer holds what it held.
    ctx->held.clear();
    ctx->pending = -1;
    ctx->decoder->Reset();
    auto forget = [&](petrel_status code, const std::string& message) {
      (void)ctx->engine->TruncateSequence(ctx->seq, 0);
      return FailF(code, "%s: %s", kFunction, message.c_str());
    };
    auto session = petrel::LoadSession(*ctx->engine, ctx->seq, path);
    if (!session.ok()) {
      const bool missing = ::access(path, R_OK) != 0;
      return forget(missing ? PETREL_ERR_IO : PETREL_ERR_FORMAT, session.status().message());
    }
    const auto metadata = nlohmann::json::parse(session->metadata, nullptr, false);
    if (!metadata.is_object() || !metadata.contains("pending") ||
        !metadata["pending"].is_number_integer()) {
      return forget(PETREL_ERR_FORMAT, std::string(path) + ": not a session saved by the C API");
    }
    const int64_t pending = metadata["pending"].get<int64_t>();
    if (pending < -1 || pending >= int64_t(ctx->engine->tokenizer()->n_vocab())) {
      return forget(PETREL_ERR_FORMAT, std::string(path) + ": the pending token is out of range");
    }
    ctx->held = std::move(session->tokens);
    ctx->pending = int32_t(pending);
    return PETREL_OK;
  });
}

}  // extern "C"
