// What the calls on a context share (capi_context.cc, capi_chat.cc, capi_embed.cc,
// capi_session.cc): one call at a time per context, and generation from token ids.
#pragma once

#include <cstdint>
#include <vector>

#include "capi/handles.h"
#include "petrel/petrel.h"

namespace petrel::capi {

// Marks a context busy for one call; a second call at the same time is refused.
class BusyScope {
 public:
  explicit BusyScope(petrel_context* ctx) : ctx_(ctx), taken_(!ctx->busy.exchange(true)) {}
  ~BusyScope() {
    if (taken_) ctx_->busy = false;
  }
  BusyScope(const BusyScope&) = delete;
  BusyScope& operator=(const BusyScope&) = delete;
  bool taken() const { return taken_; }

 private:
  petrel_context* ctx_;
  bool taken_;
};

// Records PETREL_ERR_STATE for a second call on a busy context.
petrel_status RefuseBusy(const char* function);

// Feeds `tokens` after what the context holds and generates (`first`: the generated text
// begins a text, its first piece decoded without the leading space a continuation has) with
// `params` (already read and checked for struct size), streaming through `callback`. The caller
// holds the context's BusyScope.
petrel_status GenerateTokens(petrel_context* ctx, std::vector<int32_t> tokens, bool first,
                             const petrel_sampling_params& params, petrel_token_callback callback,
                             void* user_data, petrel_generate_result* result, const char* function);

}  // namespace petrel::capi
