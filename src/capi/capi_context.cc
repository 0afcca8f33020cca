// The C API's contexts and generation: petrel_context_new/free/reset and petrel_generate, which
// drives a Sequence through the engine as `petrel run` does (same options, same text path:
// streaming detokenizer, then the end-marker filter), so greedy output matches the command.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string_view>

#include "capi/capi_errors.h"
#include "capi/context_calls.h"
#include "capi/handles.h"
#include "capi/live_handles.h"
#include "core/base/log.h"
#include "core/generation/end_text_filter.h"
#include "core/generation/sampling/sampling_fields.h"  // CheckSamplingParams
#include "core/generation/sequence.h"
#include "core/generation/speculative.h"  // RunSpeculative
#include "core/model/lora_adapter.h"      // ParseLoraArgument
#include "core/tokenizer/unicode.h"       // tok::FirstInvalidUtf8

namespace petrel::capi {
namespace {

// At most this many threads per context: more is a mistake, not a machine.
constexpr uint32_t kMaxThreads = 4096;
// At most this many sequences per context (each has a full context's KV room).
constexpr uint32_t kMaxSequences = 1024;

Result<DType> KvType(const petrel_kv_type& type) {
  switch (EnumBits(type)) {
    case PETREL_KV_F16:
      return DType::kF16;
    case PETREL_KV_F32:
      return DType::kF32;
    case PETREL_KV_Q8_0:
      return DType::kQ8_0;
  }
  return Error("petrel_context_params: kv_type %d is not a petrel_kv_type", EnumBits(type));
}

petrel_stop_reason StopReason(const std::string& reason) {
  if (reason == "eos") return PETREL_STOP_EOS;
  if (reason == "length") return PETREL_STOP_LENGTH;
  if (reason == "context") return PETREL_STOP_CONTEXT;
  if (reason == "cancelled") return PETREL_STOP_CANCELLED;
  return PETREL_STOP_NONE;
}

// The generate options `petrel run` would use for these params (tools/cmd_run.cc), for a
// sequence that starts with `first_token`.
Result<GenerateOptions> ToGenerateOptions(const petrel_sampling_params& params,
                                          const Tokenizer& tokenizer, int32_t first_token) {
  GenerateOptions options;
  if (params.max_tokens < -1) {
    return Error("petrel_sampling_params: max_tokens %d (expected -1 or a count)",
                 params.max_tokens);
  }
  options.max_new_tokens = params.max_tokens < 0 ? SIZE_MAX : size_t(params.max_tokens);
  options.ignore_eos = params.ignore_eos != 0;
  options.skip_special = true;
  SamplingParams& sampling = options.sampling;
  sampling.temperature = params.temperature;
  sampling.top_k = params.top_k;
  sampling.top_p = params.top_p;
  sampling.min_p = params.min_p;
  sampling.repeat_penalty = params.repeat_penalty;
  if (params.seed == PETREL_SEED_RANDOM) {
    std::random_device entropy;
    sampling.seed = ((uint64_t(entropy()) << 32) | entropy()) & uint64_t(INT64_MAX);
  } else {
    sampling.seed = params.seed;
  }
  if (Status status = CheckSamplingParams(sampling); !status.ok()) {
    return status.Wrap("petrel_sampling_params");
  }
  // As `petrel run`: a BOS token is never shifted out, and -n N shifts the context to reach N.
  options.keep = tokenizer.bos_id() >= 0 && first_token == tokenizer.bos_id() ? 1 : 0;
  options.context_shift = params.max_tokens >= 0;
  return options;
}

// Feeds `prompt` without sampling (max_tokens 0).
petrel_status Prefill(petrel_context* ctx, const std::vector<int32_t>& prompt,
                      const char* function) {
  const size_t before = ctx->engine->SequenceLength(ctx->seq);
  if (before + prompt.size() > ctx->engine->context()) {
    return FailF(PETREL_ERR_STATE, "%s: %zu prompt tokens do not fit the context (%zu of %zu held)",
                 function, prompt.size(), before, ctx->engine->context());
  }
  std::vector<float> logits;
  if (Status status = ctx->engine->Prefill(ctx->seq, prompt, false, &logits); !status.ok()) {
    (void)ctx->engine->TruncateSequence(ctx->seq, before);
    return FailF(PETREL_ERR_BACKEND, "%s: %s", function, status.message().c_str());
  }
  ctx->held.insert(ctx->held.end(), prompt.begin(), prompt.end());
  ctx->pending = -1;
  return PETREL_OK;
}

}  // namespace

petrel_status RefuseBusy(const char* function) {
  return FailF(PETREL_ERR_STATE,
               "%s: the context is in use by another call (one thread at a time, and not from "
               "its own callback)",
               function);
}

petrel_status GenerateTokens(petrel_context* ctx, std::vector<int32_t> tokens, bool first,
                             const petrel_sampling_params& given, petrel_token_callback callback,
                             void* user_data, petrel_generate_result* result,
                             const char* function) {
  if (given.reserved != 0) {
    return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: petrel_sampling_params.reserved must be 0",
                 function);
  }
  if (tokens.empty()) {
    return FailF(PETREL_ERR_INVALID_ARGUMENT,
                 "%s: the prompt is empty and the context holds nothing to continue", function);
  }
  petrel::Engine& engine = *ctx->engine;
  const petrel::Tokenizer& tokenizer = *engine.tokenizer();
  petrel_generate_result outcome = {sizeof(petrel_generate_result), 0, 0, PETREL_STOP_NONE};
  const int32_t first_token = ctx->held.empty() ? tokens[0] : ctx->held[0];
  auto options = ToGenerateOptions(given, tokenizer, first_token);
  if (!options.ok()) return Fail(PETREL_ERR_INVALID_ARGUMENT, options.status().message());
  outcome.n_prompt_tokens = tokens.size();
  if (given.max_tokens == 0) {
    petrel_status status = Prefill(ctx, tokens, function);
    if (status == PETREL_OK) WriteSized(outcome, result);
    return status;
  }

  // Text goes through the context's own decoder, then the end-marker filter, as `petrel run`
  // prints it. After the first text the decoder starts from the last token fed, so that the
  // first new piece gets its leading space as it would have in one long generation (the
  // sequence's own decoder sees only this call's tokens).
  ctx->decoder->Reset();
  if (!first) (void)ctx->decoder->Push(tokens.back());
  petrel::EndTextFilter end_text(&tokenizer, /*keep=*/false);
  auto on_token = [&](const petrel::GeneratedToken& token, std::string_view) {
    if (token.id < 0) return true;  // the sequence's held-back tail: ours is flushed below
    const std::string piece = end_text.Push(ctx->decoder->Push(token.id));
    return callback(piece.data(), piece.size(), user_data) == 0;
  };
  auto sequence = petrel::Sequence::Create(engine, ctx->seq, tokens, *options, on_token, ctx->held);
  if (!sequence.ok())
    return FailF(PETREL_ERR_STATE, "%s: %s", function, sequence.status().message().c_str());
  petrel::RunSpeculative(engine, **sequence, nullptr);

  // What the engine sequence holds now (a failed step leaves it as before that step), and
  // the token to feed first next time: the last one sampled, unless it ended the text.
  const petrel::GenerateResult& done = (*sequence)->result();
  ctx->held = (*sequence)->held();
  ctx->pending = -1;
  const bool ended = done.stop_reason == "eos" || done.stop_reason == "error";
  if (!ended && !done.new_ids.empty()) ctx->pending = done.new_ids.back();
  // The text still held back; its callback cannot cancel what has ended.
  const std::string tail = end_text.Push(ctx->decoder->Flush()) + end_text.Flush();
  if (!tail.empty()) callback(tail.data(), tail.size(), user_data);

  outcome.n_generated_tokens = done.new_ids.size();
  outcome.stop_reason = petrel::capi::StopReason(done.stop_reason);
  WriteSized(outcome, result);
  if (!(*sequence)->status().ok()) {
    return FailF(PETREL_ERR_BACKEND, "%s: %s", function, (*sequence)->status().message().c_str());
  }
  if (done.stop_reason == "cancelled") {
    return FailF(PETREL_ERR_CANCELLED, "%s: cancelled by the callback", function);
  }
  return PETREL_OK;
}

}  // namespace petrel::capi

using petrel::capi::Fail;
using petrel::capi::FailF;
using petrel::capi::Guard;

extern "C" {

petrel_status petrel_context_new(petrel_model* model, const petrel_context_params* params,
                                 petrel_context** out) {
  return Guard("petrel_context_new", [&]() -> petrel_status {
    if (!out) return Fail(PETREL_ERR_INVALID_ARGUMENT, "petrel_context_new: out is NULL");
    *out = nullptr;
    if (petrel_status status = petrel::capi::CheckModel(model, "petrel_context_new")) {
      return status;
    }
    petrel_context_params given;
    if (petrel_status status = petrel::capi::ReadParams(params, petrel_context_default_params(),
                                                        "petrel_context_params", &given)) {
      return status;
    }
    if (given.n_threads > petrel::capi::kMaxThreads) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT, "petrel_context_params: n_threads %u (at most %u)",
                   given.n_threads, petrel::capi::kMaxThreads);
    }
    if (given.reserved != 0) {
      return Fail(PETREL_ERR_INVALID_ARGUMENT, "petrel_context_params: reserved must be 0");
    }
    const uint32_t n_sequences = given.n_sequences == 0 ? 1 : given.n_sequences;
    if (n_sequences > petrel::capi::kMaxSequences) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT,
                   "petrel_context_params: n_sequences %u (at most %u)", n_sequences,
                   petrel::capi::kMaxSequences);
    }
    if (given.batch_tokens == 0) {
      return Fail(PETREL_ERR_INVALID_ARGUMENT,
                  "petrel_context_params: batch_tokens must be positive");
    }
    auto kv_type = petrel::capi::KvType(given.kv_type);
    if (!kv_type.ok()) return Fail(PETREL_ERR_INVALID_ARGUMENT, kv_type.status().message());
    petrel::EngineOptions options;
    if (given.n_lora > 0 && !given.lora) {
      return Fail(PETREL_ERR_INVALID_ARGUMENT,
                  "petrel_context_params: lora is NULL but n_lora is not 0");
    }
    for (size_t i = 0; i < given.n_lora; ++i) {
      if (!given.lora[i]) {
        return FailF(PETREL_ERR_INVALID_ARGUMENT, "petrel_context_params: lora[%zu] is NULL", i);
      }
      auto adapter = petrel::ParseLoraArgument(given.lora[i]);
      if (!adapter.ok()) {
        return FailF(PETREL_ERR_INVALID_ARGUMENT, "petrel_context_params: lora[%zu]: %s", i,
                     adapter.status().message().c_str());
      }
      if (::access(adapter->path.c_str(), R_OK) != 0) {
        return FailF(PETREL_ERR_IO, "petrel_context_params: lora[%zu]: cannot open %s (%s)", i,
                     adapter->path.c_str(), std::strerror(errno));
      }
      options.lora.push_back(std::move(adapter).value());
    }
    options.n_threads = given.n_threads;
    options.context = given.context;
    options.max_batch_tokens = given.batch_tokens;
    options.kv_type = *kv_type;
    options.max_sequences = n_sequences;
    options.device = model->device;
    if (model->device != "cpu") {
      options.device_layer_rule =
          model->gpu_layers < 0 ? petrel::GpuLayerRule::kAll : petrel::GpuLayerRule::kCount;
      options.device_layers = model->gpu_layers < 0 ? 0 : size_t(model->gpu_layers);
    }
    auto ctx = std::make_unique<petrel_context>();
    ctx->model = model;
    {
      std::lock_guard<std::mutex> lock(model->load_mutex);
      auto engine = petrel::Engine::Load(model->path, options);
      if (!engine.ok()) {
        return Fail(PETREL_ERR_BACKEND, "petrel_context_new: " + engine.status().message());
      }
      ctx->engine = std::move(engine).value();
    }
    if (!ctx->engine->tokenizer())
      return Fail(PETREL_ERR_STATE, "petrel_context_new: the model has no tokenizer");
    for (uint32_t i = 0; i < n_sequences; ++i) ctx->seqs.push_back(ctx->engine->NewSequence());
    ctx->seq = ctx->seqs[0];
    ctx->decoder = std::make_unique<petrel::StreamDecoder>(*ctx->engine->tokenizer());
    *out = ctx.release();
    petrel::capi::AddLiveContext(*out, model);
    return PETREL_OK;
  });
}

void petrel_context_free(petrel_context* ctx) {
  if (!ctx) return;
  if (!petrel::capi::RemoveLiveContext(ctx)) {
    petrel::Log(petrel::LogLevel::kError,
                "petrel_context_free: not a live petrel_context (freed already, or never "
                "returned by petrel_context_new); nothing freed");
    return;
  }
  delete ctx;
}

size_t petrel_context_n_tokens(const petrel_context* ctx) {
  if (!petrel::capi::IsLiveContext(ctx)) return 0;
  return ctx->held.size() + (ctx->pending >= 0 ? 1 : 0);
}

petrel_status petrel_context_reset(petrel_context* ctx) {
  return Guard("petrel_context_reset", [&]() -> petrel_status {
    if (petrel_status status = petrel::capi::CheckContext(ctx, "petrel_context_reset")) {
      return status;
    }
    petrel::capi::BusyScope busy(ctx);
    if (!busy.taken()) return petrel::capi::RefuseBusy("petrel_context_reset");
    for (petrel::SeqId seq : ctx->seqs) {
      if (petrel::Status status = ctx->engine->TruncateSequence(seq, 0); !status.ok()) {
        return Fail(PETREL_ERR_BACKEND, "petrel_context_reset: " + status.message());
      }
    }
    ctx->held.clear();
    ctx->pending = -1;
    ctx->decoder->Reset();
    return PETREL_OK;
  });
}

petrel_status petrel_generate(petrel_context* ctx, const char* prompt, size_t prompt_len,
                              const petrel_sampling_params* params, petrel_token_callback callback,
                              void* user_data, petrel_generate_result* result) {
  return Guard("petrel_generate", [&]() -> petrel_status {
    petrel_generate_result outcome = {sizeof(petrel_generate_result), 0, 0, PETREL_STOP_NONE};
    petrel::capi::WriteSized(outcome, result);
    if (petrel_status status = petrel::capi::CheckContext(ctx, "petrel_generate")) return status;
    if (!callback) return Fail(PETREL_ERR_INVALID_ARGUMENT, "petrel_generate: callback is NULL");
    if (!prompt && prompt_len > 0)
      return Fail(PETREL_ERR_INVALID_ARGUMENT, "petrel_generate: prompt is NULL");
    petrel_sampling_params given;
    if (petrel_status status = petrel::capi::ReadParams(params, petrel_sampling_default_params(),
                                                        "petrel_sampling_params", &given)) {
      return status;
    }
    petrel::capi::BusyScope busy(ctx);
    if (!busy.taken()) return petrel::capi::RefuseBusy("petrel_generate");
    const std::string_view text(prompt ? prompt : "", prompt_len);
    if (const size_t bad = petrel::tok::FirstInvalidUtf8(text); bad != std::string_view::npos) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT,
                   "petrel_generate: the prompt is not valid UTF-8 at byte offset %zu (0x%02x)",
                   bad, unsigned(uint8_t(text[bad])));
    }
    // The tokens to feed: the one sampled last and not fed yet, then the new text. Only the
    // context's first text gets BOS.
    const bool first = ctx->held.empty() && ctx->pending < 0;
    std::vector<int32_t> tokens;
    if (ctx->pending >= 0) tokens.push_back(ctx->pending);
    if (!text.empty() || first) {
      const petrel::Tokenizer& tokenizer = *ctx->engine->tokenizer();
      petrel::EncodeOptions encode;
      encode.add_special = first && given.add_bos != 0;
      encode.parse_special = given.parse_special != 0;
      std::vector<int32_t> ids = tokenizer.Encode(text, encode);
      // BOS once: a prompt that spells it out with parse_special does not get a second.
      const int32_t bos = tokenizer.bos_id();
      if (encode.add_special && bos >= 0 && ids.size() >= 2 && ids[0] == bos && ids[1] == bos) {
        ids.erase(ids.begin());
      }
      tokens.insert(tokens.end(), ids.begin(), ids.end());
    }
    return petrel::capi::GenerateTokens(ctx, std::move(tokens), first, given, callback, user_data,
                                        result, "petrel_generate");
  });
}

}  // extern "C"
