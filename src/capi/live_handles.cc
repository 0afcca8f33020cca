// The set of live handles (live_handles.h): two maps under one mutex. A lookup costs a lock and
// a hash probe, nothing next to a tokenize or a forward pass.
#include "capi/live_handles.h"

#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "capi/capi_errors.h"

namespace petrel::capi {
namespace {

struct LiveHandles {
  std::mutex mutex;
  std::unordered_set<const petrel_model*> models;
  std::unordered_map<const petrel_context*, const petrel_model*> contexts;  // to their model
};

// Never destroyed: a handle freed from another static destructor at exit still finds it.
LiveHandles& Live() {
  static LiveHandles* live = new LiveHandles;
  return *live;
}

}  // namespace

void AddLiveModel(const petrel_model* model) {
  std::lock_guard<std::mutex> lock(Live().mutex);
  Live().models.insert(model);
}

void AddLiveContext(const petrel_context* ctx, const petrel_model* model) {
  std::lock_guard<std::mutex> lock(Live().mutex);
  Live().contexts.emplace(ctx, model);
}

bool RemoveLiveModel(const petrel_model* model) {
  std::lock_guard<std::mutex> lock(Live().mutex);
  return Live().models.erase(model) > 0;
}

bool RemoveLiveContext(const petrel_context* ctx) {
  std::lock_guard<std::mutex> lock(Live().mutex);
  return Live().contexts.erase(ctx) > 0;
}

bool IsLiveModel(const petrel_model* model) {
  std::lock_guard<std::mutex> lock(Live().mutex);
  return Live().models.count(model) > 0;
}

bool IsLiveContext(const petrel_context* ctx) {
  std::lock_guard<std::mutex> lock(Live().mutex);
  return Live().contexts.count(ctx) > 0;
}

size_t LiveContextsOf(const petrel_model* model) {
  std::lock_guard<std::mutex> lock(Live().mutex);
  size_t n = 0;
  for (const auto& [ctx, owner] : Live().contexts) n += owner == model ? 1 : 0;
  return n;
}

petrel_status CheckModel(const petrel_model* model, const char* function) {
  if (!model) return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: model is NULL", function);
  if (!IsLiveModel(model)) {
    return FailF(PETREL_ERR_INVALID_ARGUMENT,
                 "%s: model is not a live petrel_model (freed, or never returned by "
                 "petrel_model_load)",
                 function);
  }
  return PETREL_OK;
}

petrel_status CheckContext(const petrel_context* ctx, const char* function) {
  if (!ctx) return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", function);
  if (!IsLiveContext(ctx)) {
    return FailF(PETREL_ERR_INVALID_ARGUMENT,
                 "%s: ctx is not a live petrel_context (freed, or never returned by "
                 "petrel_context_new)",
                 function);
  }
  return PETREL_OK;
}

}  // namespace petrel::capi
