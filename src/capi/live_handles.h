// Which handles are alive: every model and context the library returned and has not freed yet.
// Each entry point looks a handle up here before touching it, so a freed handle, a double
// free or a pointer the library never returned is PETREL_ERR_INVALID_ARGUMENT instead of a
// use after free: the lookup compares addresses and never reads through the pointer. (A new
// handle may reuse a freed one's address; then the old pointer names the new object, as with
// any allocator, which is why the API still asks callers not to use freed handles.)
#pragma once

#include "petrel/petrel.h"

namespace petrel::capi {

void AddLiveModel(const petrel_model* model);
void AddLiveContext(const petrel_context* ctx, const petrel_model* model);
// Forget the handle; false when it was not alive (freed already, or never returned).
bool RemoveLiveModel(const petrel_model* model);
bool RemoveLiveContext(const petrel_context* ctx);
bool IsLiveModel(const petrel_model* model);
bool IsLiveContext(const petrel_context* ctx);
// Contexts of `model` still alive (a model freed before them would leave them dangling).
size_t LiveContextsOf(const petrel_model* model);

// PETREL_OK for a live handle; otherwise records "FUNCTION: model is NULL" or "...: model is
// not a live petrel_model (freed, or never returned by petrel_model_load)".
petrel_status CheckModel(const petrel_model* model, const char* function);
petrel_status CheckContext(const petrel_context* ctx, const char* function);

}  // namespace petrel::capi
