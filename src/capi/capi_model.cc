// The C API's library-wide calls, models, and tokenizing: petrel_version, the params defaults,
// petrel_model_load/free, petrel_tokenize, petrel_detokenize.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <string_view>

#include "capi/capi_errors.h"
#include "capi/handles.h"
#include "capi/live_handles.h"
#include "core/base/log.h"
#include "core/generation/sampling/sampler.h"  // SamplingParams
#include "core/tokenizer/unicode.h"            // tok::FirstInvalidUtf8

// Input structs have no padding at their end, so that a field a later version appends starts
// at this version's sizeof and an older library sees it as an unknown, non-zero byte.
static_assert(sizeof(petrel_model_params) == 24);
static_assert(sizeof(petrel_context_params) == 48);
static_assert(sizeof(petrel_sampling_params) == 56);

namespace petrel::capi {
namespace {

// Unknown flag bits are an error: a later version may give them a meaning.
petrel_status CheckFlags(uint32_t flags, uint32_t known, const char* function) {
  if ((flags & ~known) == 0) return PETREL_OK;
  return FailF(PETREL_ERR_INVALID_ARGUMENT, "%s: unknown flags 0x%x", function, flags & ~known);
}

// A file or folder the process cannot open is an I/O error; what LoadModel then refuses is a
// format error.
petrel_status CheckReadable(const char* path) {
  struct stat info;
  if (::stat(path, &info) != 0) {
    return FailF(PETREL_ERR_IO, "%s: cannot open the model (%s)", path, std::strerror(errno));
  }
  const int fd = ::open(path, O_RDONLY | (S_ISDIR(info.st_mode) ? O_DIRECTORY : 0));
  if (fd < 0)
    return FailF(PETREL_ERR_IO, "%s: cannot open the model (%s)", path, std::strerror(errno));
  ::close(fd);
  return PETREL_OK;
}

const Tokenizer* ModelTokenizer(const petrel_model* model) {
  return model->loaded->tokenizer.get();
}

}  // namespace
}  // namespace petrel::capi

using petrel::capi::Fail;
using petrel::capi::FailF;
using petrel::capi::Guard;

extern "C" {

const char* petrel_version(void) { return PETREL_LIBRARY_VERSION; }

void petrel_set_log_level(petrel_log_level level) {
  using petrel::LogLevel;
  switch (petrel::capi::EnumBits(level)) {
    case PETREL_LOG_DEBUG:
      petrel::SetLogLevel(LogLevel::kDebug);
      return;
    case PETREL_LOG_INFO:
      petrel::SetLogLevel(LogLevel::kInfo);
      return;
    case PETREL_LOG_WARNING:
      petrel::SetLogLevel(LogLevel::kWarning);
      return;
    case PETREL_LOG_ERROR:
      petrel::SetLogLevel(LogLevel::kError);
      return;
    case PETREL_LOG_SILENT:
      petrel::SetLogLevel(LogLevel::kSilent);
      return;
  }
}

petrel_model_params petrel_model_default_params(void) {
  petrel_model_params params;
  std::memset(&params, 0, sizeof(params));
  params.struct_size = sizeof(params);
  params.device = nullptr;
  params.gpu_layers = -1;
  return params;
}

petrel_context_params petrel_context_default_params(void) {
  petrel_context_params params;
  std::memset(&params, 0, sizeof(params));
  params.struct_size = sizeof(params);
  params.n_threads = 0;
  params.context = 0;
  params.batch_tokens = 512;
  params.kv_type = PETREL_KV_F16;
  params.lora = nullptr;
  params.n_lora = 0;
  params.n_sequences = 1;
  params.reserved = 0;
  return params;
}

petrel_sampling_params petrel_sampling_default_params(void) {
  // The defaults of `petrel run` (petrel::SamplingParams and -n 64).
  const petrel::SamplingParams engine_defaults;
  petrel_sampling_params params;
  std::memset(&params, 0, sizeof(params));
  params.struct_size = sizeof(params);
  params.max_tokens = 64;
  params.temperature = engine_defaults.temperature;
  params.top_k = engine_defaults.top_k;
  params.top_p = engine_defaults.top_p;
  params.min_p = engine_defaults.min_p;
  params.repeat_penalty = engine_defaults.repeat_penalty;
  params.seed = PETREL_SEED_RANDOM;
  params.ignore_eos = 0;
  params.add_bos = 1;
  params.parse_special = 0;
  params.reserved = 0;
  return params;
}

petrel_status petrel_model_load(const char* path, const petrel_model_params* params,
                                petrel_model** out) {
  return Guard("petrel_model_load", [&]() -> petrel_status {
    if (!out) return Fail(PETREL_ERR_INVALID_ARGUMENT, "petrel_model_load: out is NULL");
    *out = nullptr;
    if (!path || !*path)
      return Fail(PETREL_ERR_INVALID_ARGUMENT, "petrel_model_load: no path given");
    petrel_model_params given;
    if (petrel_status status = petrel::capi::ReadParams(params, petrel_model_default_params(),
                                                        "petrel_model_params", &given)) {
      return status;
    }
    if (given.reserved != 0) {
      return Fail(PETREL_ERR_INVALID_ARGUMENT, "petrel_model_params: reserved must be 0");
    }
    if (given.gpu_layers < -1) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT,
                   "petrel_model_params: gpu_layers %d (expected -1 for all, or a count)",
                   given.gpu_layers);
    }
    if (petrel_status status = petrel::capi::CheckReadable(path)) return status;
    auto model = std::make_unique<petrel_model>();
    model->path = path;
    model->device = given.device && *given.device ? given.device : "cpu";
    model->gpu_layers = given.gpu_layers;
    auto loaded = petrel::LoadModel(model->path);
    if (!loaded.ok()) {
      return Fail(PETREL_ERR_FORMAT, "petrel_model_load: " + loaded.status().message());
    }
    model->loaded = std::move(loaded).value();
    *out = model.release();
    petrel::capi::AddLiveModel(*out);
    return PETREL_OK;
  });
}

void petrel_model_free(petrel_model* model) {
  if (!model) return;
  // Contexts still using the model would dangle: keep it (a leak is not a crash) and say why.
  if (const size_t contexts = petrel::capi::LiveContextsOf(model)) {
    petrel::Log(petrel::LogLevel::kError,
                "petrel_model_free: %zu contexts of this model are still alive; free them first "
                "(the model is kept)",
                contexts);
    return;
  }
  if (!petrel::capi::RemoveLiveModel(model)) {
    petrel::Log(petrel::LogLevel::kError,
                "petrel_model_free: not a live petrel_model (freed already, or never returned by "
                "petrel_model_load); nothing freed");
    return;
  }
  delete model;
}

int32_t petrel_model_n_vocab(const petrel_model* model) {
  return petrel::capi::IsLiveModel(model) ? int32_t(model->loaded->config.n_vocab) : 0;
}

int32_t petrel_model_n_ctx_train(const petrel_model* model) {
  return petrel::capi::IsLiveModel(model)
             ? int32_t(std::max<int64_t>(
                   0, std::min<int64_t>(model->loaded->config.max_context, INT32_MAX)))
             : 0;
}

petrel_status petrel_tokenize(const petrel_model* model, const char* text, size_t len,
                              uint32_t flags, int32_t* out, size_t cap, size_t* n_out) {
  return Guard("petrel_tokenize", [&]() -> petrel_status {
    if (petrel_status status = petrel::capi::CheckModel(model, "petrel_tokenize")) return status;
    if (!n_out) return Fail(PETREL_ERR_INVALID_ARGUMENT, "petrel_tokenize: n_out is NULL");
    *n_out = 0;
    if (!text && len > 0) return Fail(PETREL_ERR_INVALID_ARGUMENT, "petrel_tokenize: text is NULL");
    if (!out && cap > 0)
      return Fail(PETREL_ERR_INVALID_ARGUMENT, "petrel_tokenize: out is NULL but cap is not 0");
    if (petrel_status status = petrel::capi::CheckFlags(
            flags, PETREL_TOKENIZE_ADD_SPECIAL | PETREL_TOKENIZE_PARSE_SPECIAL,
            "petrel_tokenize")) {
      return status;
    }
    const petrel::Tokenizer* tokenizer = petrel::capi::ModelTokenizer(model);
    if (!tokenizer) return Fail(PETREL_ERR_STATE, "petrel_tokenize: the model has no tokenizer");
    const std::string_view view(text ? text : "", len);
    if (const size_t bad = petrel::tok::FirstInvalidUtf8(view); bad != std::string_view::npos) {
      return FailF(PETREL_ERR_INVALID_ARGUMENT,
                   "petrel_tokenize: the text is not valid UTF-8 at byte offset %zu (0x%02x)", bad,
                   unsigned(uint8_t(view[bad])));
    }
    petrel::EncodeOptions encode;
    encode.add_special = (flags & PETREL_TOKENIZE_ADD_SPECIAL) != 0;
    encode.parse_special = (flags & PETREL_TOKENIZE_PARSE_SPECIAL) != 0;
    const std::vector<int32_t> ids = tokenizer->Encode(view, encode);
    *n_out = ids.size();
    if (ids.size() > cap) {
      return FailF(PETREL_ERR_BUFFER_TOO_SMALL, "petrel_tokenize: %zu tokens do not fit %zu",
                   ids.size(), cap);
    }
    std::copy(ids.begin(), ids.end(), out);
    return PETREL_OK;
  });
}

petrel_status petrel_detokenize(const petrel_model* model, const int32_t* ids, size_t n_ids,
                                uint32_t flags, char* out, size_t cap, size_t* len_out) {
  return Guard("petrel_detokenize", [&]() -> petrel_status {
    if (petrel_status status = petrel::capi::CheckModel(model, "petrel_detokenize")) {
      return status;
    }
    if (!len_out) return Fail(PETREL_ERR_INVALID_ARGUMENT, "petrel_detokenize: len_out is NULL");
    *len_out = 0;
    if (!ids && n_ids > 0)
      return Fail(PETREL_ERR_INVALID_ARGUMENT, "petrel_detokenize: ids is NULL");
    if (!out && cap > 0)
      return Fail(PETREL_ERR_INVALID_ARGUMENT, "petrel_detokenize: out is NULL but cap is not 0");
    if (petrel_status status =
            petrel::capi::CheckFlags(flags, PETREL_DETOKENIZE_SPECIAL, "petrel_detokenize")) {
      return status;
    }
    const petrel::Tokenizer* tokenizer = petrel::capi::ModelTokenizer(model);
    if (!tokenizer) return Fail(PETREL_ERR_STATE, "petrel_detokenize: the model has no tokenizer");
    const int64_t n_vocab = int64_t(tokenizer->n_vocab());
    for (size_t i = 0; i < n_ids; ++i) {
      if (ids[i] < 0 || ids[i] >= n_vocab) {
        return FailF(PETREL_ERR_INVALID_ARGUMENT,
                     "petrel_detokenize: ids[%zu] = %d is outside the vocabulary (0..%lld)", i,
                     ids[i], (long long)(n_vocab - 1));
      }
    }
    const std::string text = tokenizer->Decode(std::vector<int32_t>(ids, ids + n_ids),
                                               (flags & PETREL_DETOKENIZE_SPECIAL) == 0);
    *len_out = text.size();
    if (text.size() >= cap) {
      return FailF(PETREL_ERR_BUFFER_TOO_SMALL,
                   "petrel_detokenize: %zu bytes and the NUL do not fit %zu", text.size(), cap);
    }
    std::memcpy(out, text.data(), text.size());
    out[text.size()] = '\0';
    return PETREL_OK;
  });
}

}  // extern "C"
