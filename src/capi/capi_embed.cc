// The C API's embeddings: petrel_embed runs `petrel embed`'s path (Embed: the model's pooling,
// L2 normalisation) on one text through the context's engine, in a sequence of its own that is
// freed afterwards, so the context's conversation stays as it was.
#include <algorithm>
#include <cstring>
#include <string_view>

#include "capi/capi_errors.h"
#include "capi/context_calls.h"
#include "capi/handles.h"
#include "capi/live_handles.h"
#include "core/generation/embedding.h"
#include "core/tokenizer/unicode.h"  // tok::FirstInvalidUtf8

using petrel::capi::Fail;
using petrel::capi::FailF;
using petrel::capi::Guard;

extern "C" {

petrel_status petrel_embed(petrel_context* ctx, const char* text, size_t len, float* out,
                           size_t cap, size_t* n_out) {
  constexpr const char* kFunction = "petrel_embed";
  return Guard(kFunction, [&]() -> petrel_status {
    if (petrel_status status = petrel::capi::CheckContext(ctx, kFunction)) return status;
    if (!n_out) return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: n_out is NULL", kFunction);
    *n_out = 0;
    if (!text && len > 0) return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: text is NULL", kFunction);
    if (!out && cap > 0) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: out is NULL but cap is not 0", kFunction);
    }
    const std::string_view view(text ? text : "", len);
    if (const size_t bad = petrel::tok::FirstInvalidUtf8(view); bad != std::string_view::npos) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT,
                   "%s: the text is not valid UTF-8 at byte offset %zu (0x%02x)", kFunction, bad,
                   unsigned(uint8_t(view[bad])));
    }
    petrel::capi::BusyScope busy(ctx);
    if (!busy.taken()) return petrel::capi::RefuseBusy(kFunction);
    petrel::Engine& engine = *ctx->engine;
    petrel::EncodeOptions encode;
    encode.add_special = true;
    const std::vector<int32_t> ids = engine.tokenizer()->Encode(view, encode);
    if (ids.empty()) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: the text is empty and the model adds no BOS",
                   kFunction);
    }
    // The text's rows go in the KV room the conversation leaves.
    const size_t held = engine.SequenceLength(ctx->seq);
    if (held + ids.size() > engine.context()) {
      return FailF(PETREL_ERR_STATE,
                   "%s: %zu tokens do not fit the context beside the %zu it holds (of %zu)",
                   kFunction, ids.size(), held, engine.context());
    }
    const std::vector<std::vector<int32_t>> inputs = {ids};
    auto embeddings = petrel::Embed(engine, inputs);
    if (!embeddings.ok()) {
      return FailF(PETREL_ERR_BACKEND, "%s: %s", kFunction, embeddings.status().message().c_str());
    }
    const std::vector<float>& vector = embeddings->vectors.at(0);
    if (vector.size() != embeddings->dim) {
      return FailF(PETREL_ERR_STATE,
                   "%s: the model's pooling is none (one vector per token), not one per text",
                   kFunction);
    }
    *n_out = vector.size();
    if (vector.size() > cap) {
      return FailF(PETREL_ERR_BUFFER_TOO_SMALL, "%s: %zu floats do not fit %zu", kFunction,
                   vector.size(), cap);
    }
    std::copy(vector.begin(), vector.end(), out);
    return PETREL_OK;
  });
}

}  // extern "C"
