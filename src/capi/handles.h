// What the C API's opaque handles hold. A model is read-only once loaded, so threads share it;
// a context owns an engine (its own KV cache, scratch and thread pool), so that contexts run in
// parallel without locks: each maps the model's file again, and the weights' pages are shared
// by the page cache.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/chat/chat_prompt.h"     // ChatPrompt
#include "core/model/loader.h"         // LoadedModel
#include "core/runtime/engine.h"       // Engine, EngineOptions, SeqId
#include "core/tokenizer/tokenizer.h"  // StreamDecoder
#include "petrel/petrel.h"

struct petrel_model {
  std::string path;
  std::string device;  // "cpu" or the backend for offloaded layers
  int32_t gpu_layers = -1;
  // The config and tokenizer, for petrel_tokenize and friends; contexts load their own engine.
  std::unique_ptr<petrel::LoadedModel> loaded;
  // Contexts of a model are created one at a time: opening a device backend (its instance,
  // device discovery) is not written for concurrent calls, and loads are rare.
  std::mutex load_mutex;
  // The model's own chat template, read on first use (petrel_chat_*); chat_error says why
  // there is none. Guarded by chat_mutex: threads share the model.
  mutable std::mutex chat_mutex;
  mutable bool chat_read = false;
  mutable std::optional<petrel::ChatPrompt> chat;
  mutable std::string chat_error;
};

struct petrel_context {
  petrel_model* model = nullptr;
  std::unique_ptr<petrel::Engine> engine;
  petrel::SeqId seq = -1;  // the context's own text: seqs[0]
  std::vector<petrel::SeqId> seqs;  // every sequence petrel_decode_batch may feed
  std::vector<int32_t> held;  // the tokens the engine sequence holds, in order
  // The token sampled last and not yet fed (a generation that stopped at max_tokens or was
  // cancelled); -1 when none. The next petrel_generate feeds it first, so it resumes.
  int32_t pending = -1;
  // The streaming detokenizer of the text sent to callbacks (a piece's leading space depends
  // on the token before it, so a resumed generation primes it with the last token fed).
  std::unique_ptr<petrel::StreamDecoder> decoder;
  // Set while a call runs: a second call at the same time (another thread, or the callback
  // calling back in) is refused with PETREL_ERR_STATE instead of corrupting the context.
  std::atomic<bool> busy{false};
};
