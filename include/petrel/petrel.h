/* petrel/petrel.h: the C API of libpetrel, a stable interface to load a model, tokenize, and stream
 * generated text (docs/LIBRARY.md). C99; every symbol is petrel_* or PETREL_*.
 *
 * Conventions:
 *  - Every function that can fail returns a petrel_status; PETREL_OK is 0. After a failure,
 *    petrel_last_error() gives a one-line message, per thread.
 *  - Handles are opaque. What petrel_*_new/_load returns, the caller frees with the matching
 *    _free; freeing NULL does nothing. Strings and buffers passed in are borrowed for the call.
 *  - A model may be used by many threads at once (it is read-only after loading); a context by
 *    one thread at a time. Free every context of a model before the model.
 *  - Parameter structs begin with struct_size: fill them from petrel_*_default_params() (which
 *    sets it to the size this header knows), then change fields. A library that knows fewer
 *    fields accepts a larger struct when the fields it does not know are zero.
 */
#ifndef PETREL_H_
#define PETREL_H_

#include <stddef.h>
#include <stdint.h>

#if defined(PETREL_BUILDING_LIBRARY) && defined(__GNUC__)
#define PETREL_API __attribute__((visibility("default")))
#else
#define PETREL_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; petrel_version() gives the library's. */
#define PETREL_VERSION_MAJOR 0
#define PETREL_VERSION_MINOR 1
#define PETREL_VERSION_PATCH 0

typedef enum petrel_status {
  PETREL_OK = 0,
  PETREL_ERR_INVALID_ARGUMENT = 1, /* a NULL handle or pointer, a value out of range, bad UTF-8 */
  PETREL_ERR_IO = 2,               /* a file could not be opened or read */
  PETREL_ERR_FORMAT = 3,           /* a file is not a model petrel can load */
  PETREL_ERR_BUFFER_TOO_SMALL = 4, /* the output did not fit; the size needed is reported */
  PETREL_ERR_CANCELLED = 5,        /* the callback asked to stop; the context stays usable */
  PETREL_ERR_STATE = 6,            /* the call does not fit the handle's state (a full context) */
  PETREL_ERR_OUT_OF_MEMORY = 7,
  PETREL_ERR_BACKEND = 8, /* the engine failed: memory for the KV cache, a device, a pass */
  PETREL_ERR_INTERNAL = 9 /* a bug in petrel: please report the message */
} petrel_status;

typedef enum petrel_log_level {
  PETREL_LOG_DEBUG = 0,
  PETREL_LOG_INFO = 1,
  PETREL_LOG_WARNING = 2, /* the default */
  PETREL_LOG_ERROR = 3,
  PETREL_LOG_SILENT = 4
} petrel_log_level;

typedef enum petrel_kv_type {
  PETREL_KV_F16 = 0, /* the default, as `petrel run` */
  PETREL_KV_F32 = 1,
  PETREL_KV_Q8_0 = 2
} petrel_kv_type;

typedef enum petrel_stop_reason {
  PETREL_STOP_NONE = 0,     /* no tokens were sampled (max_tokens 0) */
  PETREL_STOP_EOS = 1,      /* the model produced an end-of-generation token */
  PETREL_STOP_LENGTH = 2,   /* max_tokens were generated */
  PETREL_STOP_CONTEXT = 3,  /* the context is full (and shifting it was off) */
  PETREL_STOP_CANCELLED = 4 /* the callback returned nonzero */
} petrel_stop_reason;

typedef struct petrel_model petrel_model;
typedef struct petrel_context petrel_context;

typedef struct petrel_model_params {
  size_t struct_size;
  const char* device; /* backend for offloaded layers: NULL or "cpu" (none), "cuda", "vulkan:1" */
  int32_t gpu_layers; /* with a device: the last N blocks there; -1 every block and the head */
  uint32_t reserved;  /* 0 */
} petrel_model_params;

typedef struct petrel_context_params {
  size_t struct_size;
  uint32_t n_threads;     /* 0: every core */
  uint32_t context;       /* tokens the context holds; 0: the model's, at most 4096 */
  uint32_t batch_tokens;  /* prompt tokens per step (default 512) */
  petrel_kv_type kv_type; /* element type of the KV cache (default F16) */
  /* LoRA adapters added to every pass: n_lora strings as `petrel run --lora` takes them,
   * "FILE" or "FILE:SCALE" (a GGUF adapter or a PEFT folder; scale 1 by default). Copied. */
  const char* const* lora;
  size_t n_lora;
  /* Sequences the context holds for petrel_decode_batch (default 1; 0 reads as 1), each with
   * room for `context` tokens. Sequence 0 is the context's own text, the one petrel_generate
   * continues. */
  uint32_t n_sequences;
  uint32_t reserved; /* 0 */
} petrel_context_params;

#define PETREL_SEED_RANDOM UINT64_MAX

typedef struct petrel_sampling_params {
  size_t struct_size;
  int32_t max_tokens;   /* tokens to generate (default 64); -1: until the end or a full context */
  float temperature;    /* <= 0: greedy (default 0.8) */
  int32_t top_k;        /* 0: off (default 40) */
  float top_p;          /* >= 1: off (default 0.95) */
  float min_p;          /* <= 0: off (default 0.05) */
  float repeat_penalty; /* 1: off (default) */
  uint64_t seed;        /* PETREL_SEED_RANDOM (default): drawn per call */
  int32_t ignore_eos;   /* nonzero: never stop at an end-of-generation token */
  int32_t add_bos;      /* the first prompt of a context gets the BOS token (default 1) */
  /* Nonzero: special tokens spelled in the prompt ("<|im_start|>") are those tokens; 0
   * (default): they are plain text. petrel_generate_chat parses the template's own. */
  int32_t parse_special;
  uint32_t reserved; /* 0 */
} petrel_sampling_params;

/* Filled by petrel_generate when not NULL; set struct_size first (the library writes only the
 * fields that fit it). */
typedef struct petrel_generate_result {
  size_t struct_size;
  size_t n_prompt_tokens;    /* tokens fed before sampling in this call */
  size_t n_generated_tokens; /* tokens sampled in this call, the end-of-generation one included */
  petrel_stop_reason stop_reason;
} petrel_generate_result;

/* Called as text is generated: once per sampled token with the text it releases (possibly
 * empty: a character or an end marker may still be incomplete), and once more at the end when
 * held-back text remains. Return 0 to go on, nonzero to stop (PETREL_ERR_CANCELLED). `text` is
 * not NUL-terminated and is valid only during the call. */
typedef int (*petrel_token_callback)(const char* text, size_t len, void* user_data);

/* "0.1.0 (git describe)"; static storage. */
PETREL_API const char* petrel_version(void);
/* "PETREL_ERR_IO", ...; "unknown status" for a value not in the enum. Static storage. */
PETREL_API const char* petrel_status_name(petrel_status status);
/* The message of the last failed call on this thread ("" when none failed yet). Valid until
 * the next petrel_* call on this thread. */
PETREL_API const char* petrel_last_error(void);
/* Messages the library prints on stderr at or above this level (process-wide). */
PETREL_API void petrel_set_log_level(petrel_log_level level);

PETREL_API petrel_model_params petrel_model_default_params(void);
PETREL_API petrel_context_params petrel_context_default_params(void);
PETREL_API petrel_sampling_params petrel_sampling_default_params(void);

/* Loads a GGUF file or a Hugging Face folder. `params` may be NULL (the defaults). On success
 * *out owns the model; on failure *out is NULL. */
PETREL_API petrel_status petrel_model_load(const char* path, const petrel_model_params* params,
                                           petrel_model** out);
PETREL_API void petrel_model_free(petrel_model* model);
/* Vocabulary size, or 0 for NULL. */
PETREL_API int32_t petrel_model_n_vocab(const petrel_model* model);
/* Tokens the model was trained on (0 unknown or NULL). */
PETREL_API int32_t petrel_model_n_ctx_train(const petrel_model* model);

#define PETREL_TOKENIZE_ADD_SPECIAL 1u   /* BOS/EOS as the model's tokenizer adds them */
#define PETREL_TOKENIZE_PARSE_SPECIAL 2u /* match special tokens spelled in the text */

/* Tokenizes `len` bytes of UTF-8 `text` (need not be NUL-terminated; NULL with len 0 is the
 * empty text) into `out` (room for `cap` ids; may be NULL when cap is 0). *n_out gets the
 * number of ids; when it exceeds cap the result is PETREL_ERR_BUFFER_TOO_SMALL and `out` is
 * left unchanged, so a call with cap 0 asks for the size. */
PETREL_API petrel_status petrel_tokenize(const petrel_model* model, const char* text, size_t len,
                                         uint32_t flags, int32_t* out, size_t cap, size_t* n_out);

#define PETREL_DETOKENIZE_SPECIAL 1u /* keep the text of special tokens */

/* The text of `n_ids` ids into `out` (`cap` bytes), NUL-terminated; *len_out gets its length
 * without the NUL. When len + 1 exceeds cap: PETREL_ERR_BUFFER_TOO_SMALL, *len_out still set. */
PETREL_API petrel_status petrel_detokenize(const petrel_model* model, const int32_t* ids,
                                           size_t n_ids, uint32_t flags, char* out, size_t cap,
                                           size_t* len_out);

/* A context: a KV cache and the tokens it holds, for one conversation. `params` may be NULL. */
PETREL_API petrel_status petrel_context_new(petrel_model* model,
                                            const petrel_context_params* params,
                                            petrel_context** out);
PETREL_API void petrel_context_free(petrel_context* ctx);
/* Forgets every token of every sequence: the next petrel_generate starts a new text (BOS). */
PETREL_API petrel_status petrel_context_reset(petrel_context* ctx);
/* Tokens the context holds, a token sampled last and not yet fed included (0 for NULL). */
PETREL_API size_t petrel_context_n_tokens(const petrel_context* ctx);

/* Appends `prompt_len` bytes of UTF-8 `prompt` to the context and generates, streaming text
 * through `callback` (required). The first prompt of a context is tokenized with BOS (per
 * params->add_bos); later ones continue the text, so an empty prompt resumes a generation
 * that stopped (cancelled, or at max_tokens) exactly where it would have gone on. `params`
 * may be NULL (the defaults). Returns PETREL_OK when it stopped at an end token, max_tokens
 * or a full context, PETREL_ERR_CANCELLED when the callback stopped it; `result` may be NULL. */
PETREL_API petrel_status petrel_generate(petrel_context* ctx, const char* prompt, size_t prompt_len,
                                         const petrel_sampling_params* params,
                                         petrel_token_callback callback, void* user_data,
                                         petrel_generate_result* result);

/* ---- Batched decoding ---- */

/* One sequence's part of a batch: `n_tokens` ids (at least 1) that continue sequence `seq`. */
typedef struct petrel_batch_sequence {
  uint32_t seq;          /* 0 .. n_sequences - 1 of the context; at most once per batch */
  const int32_t* tokens; /* the ids, in order */
  size_t n_tokens;
  /* NULL, or room for petrel_model_n_vocab() floats: the logits after its last token. */
  float* logits;
  petrel_status status; /* set by the call: this sequence's outcome */
} petrel_batch_sequence;

typedef struct petrel_batch {
  size_t struct_size;               /* sizeof(petrel_batch) */
  petrel_batch_sequence* sequences; /* n_sequences entries (their status fields are written) */
  size_t n_sequences;
} petrel_batch;

/* Feeds several sequences of one context in one forward pass (prompt chunks and single-token
 * decodes together; at most the context's batch_tokens tokens in all), the way to generate for
 * many prompts at once with a sampler of the caller's own on the logits. Each sequence is
 * admitted on its own: one whose tokens do not fit its context or the KV cache, or hold an id
 * outside the vocabulary, gets its error in `status`, stays as it was, and the others still
 * run. Returns PETREL_OK when every sequence advanced, else the first failed sequence's status
 * (petrel_last_error says which and why). A batch that cannot run at all (a NULL pointer, a
 * sequence id out of range, too many tokens) is PETREL_ERR_INVALID_ARGUMENT and changes
 * nothing. Tokens fed to sequence 0 become part of the context's text (a token
 * petrel_generate sampled and had not fed yet is dropped). One thread at a time per context,
 * as every call on a context; petrel_context_reset empties every sequence. */
PETREL_API petrel_status petrel_decode_batch(petrel_context* ctx, const petrel_batch* batch);

/* ---- Chat templates ---- */

typedef struct petrel_chat_message {
  const char* role;    /* "system", "user", "assistant", "tool": NUL-terminated UTF-8 */
  const char* content; /* NUL-terminated UTF-8 */
} petrel_chat_message;

/* Renders `messages` with a chat template (Jinja, as the model's tokenizer_config.json or GGUF
 * metadata holds it): `template_source` NULL uses the model's own (PETREL_ERR_STATE when it has
 * none), else it is the template's text. With add_generation_prompt nonzero the text ends where
 * the assistant's reply begins. Output as petrel_detokenize's (NUL-terminated, *len_out set
 * also when it does not fit). Thread-safe on a shared model. */
PETREL_API petrel_status petrel_chat_apply_template(const petrel_model* model,
                                                    const char* template_source,
                                                    const petrel_chat_message* messages,
                                                    size_t n_messages, int add_generation_prompt,
                                                    char* out, size_t cap, size_t* len_out);

/* The assistant's reply to `messages`, streamed as petrel_generate streams. The conversation is
 * rendered with the template (as petrel_chat_apply_template, generation prompt added) and
 * tokenized with the template's control tokens parsed and the messages' text kept as text (a
 * message cannot forge a control token). The rendered tokens replace what the context held:
 * the longest common prefix stays in the KV cache and only the rest is fed, so a conversation
 * passed again with one more message costs only that message. */
PETREL_API petrel_status petrel_generate_chat(petrel_context* ctx, const char* template_source,
                                              const petrel_chat_message* messages,
                                              size_t n_messages,
                                              const petrel_sampling_params* params,
                                              petrel_token_callback callback, void* user_data,
                                              petrel_generate_result* result);

/* ---- Embeddings ---- */

/* One vector for `len` bytes of UTF-8 `text` (tokenized with BOS as the model adds it): the
 * final hidden states pooled as the model's metadata says (mean, CLS or last token) and scaled
 * to unit length (L2). Writes the model's embedding width of floats to `out` (*n_out gets it;
 * cap 0 asks for it, PETREL_ERR_BUFFER_TOO_SMALL). Uses the context's engine and KV room: the
 * text plus the tokens the context holds must fit the context, else PETREL_ERR_STATE; what the
 * context holds is kept. */
PETREL_API petrel_status petrel_embed(petrel_context* ctx, const char* text, size_t len, float* out,
                                      size_t cap, size_t* n_out);

/* ---- Sessions ---- */

/* Saves what the context holds (its tokens and KV cache rows, with a fingerprint of the model's
 * weights) to the file `path`, replacing it atomically. */
PETREL_API petrel_status petrel_context_save(petrel_context* ctx, const char* path);
/* Replaces what the context holds with a saved session of the same model and KV type
 * (PETREL_ERR_FORMAT otherwise; the context is then empty). petrel_generate with an empty
 * prompt then goes on exactly as the saved context would have. */
PETREL_API petrel_status petrel_context_load(petrel_context* ctx, const char* path);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PETREL_H_ */
