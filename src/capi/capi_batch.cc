// petrel_decode_batch: several sequences of one context advanced in one forward pass, through
// Engine::Step (the server's continuous-batching step), which admits each sequence on its own.
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "capi/capi_errors.h"
#include "capi/context_calls.h"
#include "capi/handles.h"
#include "capi/live_handles.h"

using petrel::capi::Fail;
using petrel::capi::FailF;
using petrel::capi::Guard;

namespace petrel::capi {
namespace {

constexpr const char* kFunction = "petrel_decode_batch";

// The checks that make the whole batch unrunnable; nothing is decoded when one fails.
petrel_status CheckBatch(const petrel_context* ctx, const petrel_batch& batch) {
  if (batch.n_sequences > 0 && !batch.sequences) {
    return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: sequences is NULL but n_sequences is %zu",
                 kFunction, batch.n_sequences);
  }
  size_t total = 0;
  for (size_t i = 0; i < batch.n_sequences; ++i) {
    const petrel_batch_sequence& item = batch.sequences[i];
    if (item.seq >= ctx->seqs.size()) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT,
                   "%s: sequences[%zu].seq is %u, but the context holds %zu sequences "
                   "(petrel_context_params.n_sequences)",
                   kFunction, i, item.seq, ctx->seqs.size());
    }
    if (item.n_tokens == 0 || !item.tokens) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: sequences[%zu] has no tokens", kFunction, i);
    }
    total += item.n_tokens;
  }
  const size_t limit = ctx->engine->options().max_batch_tokens;
  if (total > limit) {
    return FailF(PETREL_ERR_INVALID_ARGUMENT,
                 "%s: %zu tokens in all exceed the context's batch_tokens (%zu)", kFunction, total,
                 limit);
  }
  return PETREL_OK;
}

// The code of a sequence that Engine::Step did not admit: the caller's mistake (an id outside
// the vocabulary, a sequence repeated) or the context's state (its room or the KV cache full).
petrel_status RefusedCode(const petrel_context* ctx, std::span<const petrel_batch_sequence> items,
                          size_t i) {
  const int64_t n_vocab = ctx->engine->config().n_vocab;
  const petrel_batch_sequence& item = items[i];
  for (size_t j = 0; j < i; ++j) {
    if (items[j].seq == item.seq) return PETREL_ERR_INVALID_ARGUMENT;
  }
  for (size_t t = 0; t < item.n_tokens; ++t) {
    if (item.tokens[t] < 0 || item.tokens[t] >= n_vocab) return PETREL_ERR_INVALID_ARGUMENT;
  }
  return PETREL_ERR_STATE;
}

}  // namespace
}  // namespace petrel::capi

using petrel::capi::kFunction;

extern "C" {

petrel_status petrel_decode_batch(petrel_context* ctx, const petrel_batch* batch) {
  return Guard(kFunction, [&]() -> petrel_status {
    if (petrel_status status = petrel::capi::CheckContext(ctx, kFunction)) return status;
    if (!batch) return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: batch is NULL", kFunction);
    if (batch->struct_size < sizeof(petrel_batch)) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: batch->struct_size is %zu (expected %zu)",
                   kFunction, batch->struct_size, sizeof(petrel_batch));
    }
    petrel::capi::BusyScope busy(ctx);
    if (!busy.taken()) return petrel::capi::RefuseBusy(kFunction);
    if (petrel_status status = petrel::capi::CheckBatch(ctx, *batch)) return status;

    const std::span<petrel_batch_sequence> items(batch->sequences, batch->n_sequences);
    std::vector<petrel::StepInput> inputs;
    inputs.reserve(items.size());
    for (const petrel_batch_sequence& item : items) {
      inputs.push_back(
          {ctx->seqs[item.seq], std::span(item.tokens, item.n_tokens), item.logits != nullptr});
    }
    std::vector<petrel::StepOutput> outputs;
    const petrel::Status step = ctx->engine->Step(inputs, &outputs);
    if (!step.ok()) {
      for (petrel_batch_sequence& item : items) item.status = PETREL_ERR_BACKEND;
      return FailF(PETREL_ERR_BACKEND, "%s: %s", kFunction, step.message().c_str());
    }

    petrel_status first_failure = PETREL_OK;
    std::string first_message;
    for (size_t i = 0; i < items.size(); ++i) {
      petrel_batch_sequence& item = items[i];
      const petrel::StepOutput& output = outputs[i];
      if (!output.status.ok()) {
        item.status = petrel::capi::RefusedCode(ctx, items, i);
        if (first_failure == PETREL_OK) {
          first_failure = item.status;
          first_message = output.status.message();
        }
        continue;
      }
      item.status = PETREL_OK;
      if (item.logits) std::copy(output.logits.begin(), output.logits.end(), item.logits);
      if (item.seq == 0) {
        // The context's own text: what petrel_generate continues next.
        ctx->held.insert(ctx->held.end(), item.tokens, item.tokens + item.n_tokens);
        ctx->pending = -1;
      }
    }
    if (first_failure != PETREL_OK) {
      return FailF(first_failure, "%s: %s", kFunction, first_message.c_str());
    }
    return PETREL_OK;
  });
}

}  // extern "C"
