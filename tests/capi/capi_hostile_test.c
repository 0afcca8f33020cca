/* Hostile use of the C API: NULL and freed handles, pointers the library never returned,
 * double frees, buffers too small, text that is not UTF-8, params structs of the wrong size or
 * with bad values, a callback calling back in, a cancelled stream resumed. Every call returns
 * an error code with a one-line message; nothing crashes or touches freed memory. Built in the
 * tree against libpetrel and run in the malformed suite, so scripts/test.sh runs it under
 * AddressSanitizer and UBSan as well.
 *
 * Usage: capi_hostile_test MODEL SCRATCH_DIR */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <petrel/petrel.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "capi_check.h"

static const char kPrompt[] = "Once upon a time";

static petrel_status g_reentrant_status = PETREL_OK;
static int reenter(const char* text, size_t len, void* user_data) {
  petrel_sampling_params params = greedy(1);
  (void)text;
  (void)len;
  g_reentrant_status =
      petrel_generate((petrel_context*)user_data, "x", 1, &params, collect, NULL, NULL);
  return 1;
}

static void test_hostile_calls(petrel_model* model, const char* not_a_model) {
  petrel_model* loaded = (petrel_model*)1;
  petrel_context* ctx = (petrel_context*)1;
  petrel_sampling_params params = greedy(4);
  size_t n = 7, len = 7;
  int32_t ids[8];
  char text[8];
  stream out = {NULL, 0, 0, 0};

  /* Loading. */
  CHECK_STATUS(petrel_model_load(NULL, NULL, &loaded), PETREL_ERR_INVALID_ARGUMENT);
  CHECK(loaded == NULL);
  CHECK_STATUS(petrel_model_load("/nonexistent/model.gguf", NULL, NULL),
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_model_load("/nonexistent/model.gguf", NULL, &loaded), PETREL_ERR_IO);
  CHECK_STATUS(petrel_model_load(not_a_model, NULL, &loaded), PETREL_ERR_FORMAT);
  CHECK_STATUS(petrel_model_load("/", NULL, &loaded), PETREL_ERR_FORMAT); /* a folder, no model */
  CHECK(loaded == NULL);
  {
    petrel_model_params bad = petrel_model_default_params();
    bad.struct_size = 0;
    CHECK_STATUS(petrel_model_load(not_a_model, &bad, &loaded), PETREL_ERR_INVALID_ARGUMENT);
  }
  petrel_model_free(NULL);
  petrel_context_free(NULL);

  /* Tokenizing. */
  CHECK_STATUS(petrel_tokenize(NULL, "a", 1, 0, ids, 8, &n), PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_tokenize(model, "a", 1, 0, ids, 8, NULL), PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_tokenize(model, NULL, 3, 0, ids, 8, &n), PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_tokenize(model, "a", 1, 0, NULL, 8, &n), PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_tokenize(model, "a", 1, 0x80, ids, 8, &n), PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_tokenize(model, "ok \xff\xfe", 5, 0, ids, 8, &n),
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(petrel_last_error(), "UTF-8") != NULL);
  CHECK_STATUS(petrel_tokenize(model, "\xe2\x82", 2, 0, ids, 8, &n), PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_tokenize(model, NULL, 0, 0, NULL, 0, &n), PETREL_OK);
  CHECK(n == 0);
  ids[0] = -1;
  CHECK_STATUS(petrel_detokenize(model, ids, 1, 0, text, sizeof(text), &len),
               PETREL_ERR_INVALID_ARGUMENT);
  ids[0] = petrel_model_n_vocab(model);
  CHECK_STATUS(petrel_detokenize(model, ids, 1, 0, text, sizeof(text), &len),
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_detokenize(model, NULL, 2, 0, text, sizeof(text), &len),
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_detokenize(model, ids, 0, 0, NULL, 0, &len), PETREL_ERR_BUFFER_TOO_SMALL);
  CHECK(len == 0);

  /* Contexts. */
  CHECK_STATUS(petrel_context_new(NULL, NULL, &ctx), PETREL_ERR_INVALID_ARGUMENT);
  CHECK(ctx == NULL);
  {
    petrel_context_params bad = petrel_context_default_params();
    bad.batch_tokens = 0;
    CHECK_STATUS(petrel_context_new(model, &bad, &ctx), PETREL_ERR_INVALID_ARGUMENT);
    bad = petrel_context_default_params();
    bad.context = 0xffffffffu; /* a KV cache no machine holds: refused before allocating */
    CHECK_STATUS(petrel_context_new(model, &bad, &ctx), PETREL_ERR_BACKEND);
    CHECK(ctx == NULL);
    bad = petrel_context_default_params();
    bad.kv_type = (petrel_kv_type)42;
    CHECK_STATUS(petrel_context_new(model, &bad, &ctx), PETREL_ERR_INVALID_ARGUMENT);
  }
  {
    /* A struct from a newer header: unknown fields zero are fine, set ones are an error. */
    struct {
      petrel_context_params known;
      uint64_t newer_field;
    } newer;
    memset(&newer, 0, sizeof(newer));
    newer.known = petrel_context_default_params();
    newer.known.struct_size = sizeof(newer);
    newer.newer_field = 3;
    CHECK_STATUS(petrel_context_new(model, &newer.known, &ctx), PETREL_ERR_INVALID_ARGUMENT);
    newer.newer_field = 0;
    newer.known.context = 64;
    CHECK_STATUS(petrel_context_new(model, &newer.known, &ctx), PETREL_OK);
  }
  if (!ctx) return;
  CHECK_STATUS(petrel_context_reset(NULL), PETREL_ERR_INVALID_ARGUMENT);
  CHECK(petrel_context_n_tokens(NULL) == 0);

  /* Generating. */
  CHECK_STATUS(petrel_generate(NULL, "a", 1, &params, collect, &out, NULL),
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_generate(ctx, "a", 1, &params, NULL, &out, NULL),
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_generate(ctx, NULL, 4, &params, collect, &out, NULL),
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_generate(ctx, "bad \xc3\x28", 6, &params, collect, &out, NULL),
               PETREL_ERR_INVALID_ARGUMENT);
  {
    petrel_sampling_params bad = params;
    bad.temperature = NAN;
    CHECK_STATUS(petrel_generate(ctx, "a", 1, &bad, collect, &out, NULL),
                 PETREL_ERR_INVALID_ARGUMENT);
    bad = params;
    bad.max_tokens = -5;
    CHECK_STATUS(petrel_generate(ctx, "a", 1, &bad, collect, &out, NULL),
                 PETREL_ERR_INVALID_ARGUMENT);
    bad = params;
    bad.add_bos = 0;
    CHECK_STATUS(petrel_generate(ctx, "", 0, &bad, collect, &out, NULL),
                 PETREL_ERR_INVALID_ARGUMENT);
  }
  {
    /* A prompt longer than the context (64 tokens) does not fit. */
    char long_prompt[1024];
    size_t i;
    for (i = 0; i + 5 < sizeof(long_prompt); i += 5) memcpy(long_prompt + i, " dog.", 5);
    CHECK_STATUS(petrel_generate(ctx, long_prompt, i, &params, collect, &out, NULL),
                 PETREL_ERR_STATE);
  }
  CHECK(petrel_context_n_tokens(ctx) == 0); /* nothing above changed the context */
  /* A params struct from an older header (without add_bos) takes the default for it. */
  {
    petrel_sampling_params older = params;
    older.struct_size = offsetof(petrel_sampling_params, add_bos);
    older.add_bos = 12345;
    CHECK_STATUS(petrel_generate(ctx, kPrompt, strlen(kPrompt), &older, collect, &out, NULL),
                 PETREL_OK);
  }
  /* A callback calling into its own context is refused, and the outer call goes on. */
  CHECK_STATUS(petrel_generate(ctx, " and", 4, &params, reenter, ctx, NULL), PETREL_ERR_CANCELLED);
  CHECK(g_reentrant_status == PETREL_ERR_STATE);
  /* The context fills up (64 tokens) and says so rather than failing. */
  {
    petrel_sampling_params fill = greedy(-1);
    petrel_generate_result result;
    result.struct_size = sizeof(result);
    CHECK_STATUS(petrel_generate(ctx, "", 0, &fill, collect, &out, &result), PETREL_OK);
    CHECK(result.stop_reason == PETREL_STOP_CONTEXT || result.stop_reason == PETREL_STOP_EOS);
    if (result.stop_reason == PETREL_STOP_CONTEXT) {
      CHECK_STATUS(petrel_generate(ctx, " more text", 10, &params, collect, &out, NULL),
                   PETREL_ERR_STATE);
    }
  }
  CHECK_STATUS(petrel_context_reset(ctx), PETREL_OK);
  CHECK_STATUS(petrel_generate(ctx, kPrompt, strlen(kPrompt), &params, collect, &out, NULL),
               PETREL_OK);
  free(out.text);
  petrel_context_free(ctx);
}

/* Handles the library does not know: freed ones, double frees, a pointer to something else,
 * a model freed while a context uses it. The library looks handles up by address in its table
 * of live ones and never reads through an unknown pointer (ASan would see it). */
static void test_dead_handles(const char* model_path) {
  petrel_model* model = NULL;
  petrel_context* ctx = NULL;
  petrel_context* freed_ctx;
  petrel_model* freed_model;
  long not_a_handle[16];
  petrel_sampling_params params = greedy(4);
  stream out = {NULL, 0, 0, 0};
  int32_t ids[8];
  size_t n = 0;
  char text[8];
  size_t len = 0;
  float vector[4];
  petrel_chat_message message = {"user", "hi"};

  memset(not_a_handle, 0x5a, sizeof(not_a_handle));
  CHECK_STATUS(petrel_model_load(model_path, NULL, &model), PETREL_OK);
  if (!model) return;
  CHECK_STATUS(petrel_context_new(model, NULL, &ctx), PETREL_OK);
  if (!ctx) return;

  /* A model with a live context is not freed (it would dangle): the call says so and keeps it. */
  petrel_model_free(model);
  CHECK_STATUS(petrel_tokenize(model, "a", 1, 0, ids, 8, &n), PETREL_OK);

  freed_ctx = ctx;
  petrel_context_free(ctx);
  CHECK_STATUS(petrel_generate(freed_ctx, "a", 1, &params, collect, &out, NULL),
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(petrel_last_error(), "not a live petrel_context") != NULL);
  CHECK_STATUS(petrel_context_reset(freed_ctx), PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_embed(freed_ctx, "a", 1, vector, 4, &n), PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_context_save(freed_ctx, "/tmp/never-written"), PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_context_load(freed_ctx, "/tmp/never-read"), PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(
      petrel_generate_chat(freed_ctx, "{{ 1 }}", &message, 1, &params, collect, &out, NULL),
      PETREL_ERR_INVALID_ARGUMENT);
  CHECK(petrel_context_n_tokens(freed_ctx) == 0);
  petrel_context_free(freed_ctx); /* a double free is refused, not done */

  /* A pointer the library never returned. */
  CHECK_STATUS(petrel_generate((petrel_context*)not_a_handle, "a", 1, &params, collect, &out, NULL),
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_tokenize((petrel_model*)not_a_handle, "a", 1, 0, ids, 8, &n),
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_context_new((petrel_model*)not_a_handle, NULL, &ctx),
               PETREL_ERR_INVALID_ARGUMENT);
  petrel_context_free((petrel_context*)not_a_handle);
  petrel_model_free((petrel_model*)not_a_handle);

  freed_model = model;
  petrel_model_free(model); /* no context left: freed now */
  CHECK_STATUS(petrel_tokenize(freed_model, "a", 1, 0, ids, 8, &n), PETREL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(petrel_last_error(), "not a live petrel_model") != NULL);
  CHECK_STATUS(petrel_detokenize(freed_model, ids, 1, 0, text, sizeof(text), &len),
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_context_new(freed_model, NULL, &ctx), PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(
      petrel_chat_apply_template(freed_model, "{{ 1 }}", &message, 1, 1, text, sizeof(text), &len),
      PETREL_ERR_INVALID_ARGUMENT);
  CHECK(petrel_model_n_vocab(freed_model) == 0);
  petrel_model_free(freed_model);
  free(out.text);
}

/* Outputs that do not fit: the size needed is reported and the buffer is left as it was. */
static void test_small_buffers(petrel_model* model) {
  petrel_context* ctx = NULL;
  int32_t ids[2] = {-7, -7};
  char text[4] = {'x', 'x', 'x', 'x'};
  float vector[2] = {42.0f, 42.0f};
  size_t n = 0, len = 0;
  petrel_chat_message message = {"user", "a long enough message"};
  CHECK_STATUS(
      petrel_tokenize(model, kPrompt, strlen(kPrompt), PETREL_TOKENIZE_ADD_SPECIAL, ids, 2, &n),
      PETREL_ERR_BUFFER_TOO_SMALL);
  CHECK(n > 2 && ids[0] == -7 && ids[1] == -7);
  CHECK_STATUS(petrel_chat_apply_template(model, "{{ messages[0].content }}", &message, 1, 0, text,
                                          sizeof(text), &len),
               PETREL_ERR_BUFFER_TOO_SMALL);
  CHECK(len == strlen(message.content) && text[0] == 'x' && text[3] == 'x');
  CHECK_STATUS(petrel_context_new(model, NULL, &ctx), PETREL_OK);
  if (!ctx) return;
  CHECK_STATUS(petrel_embed(ctx, kPrompt, strlen(kPrompt), vector, 2, &n),
               PETREL_ERR_BUFFER_TOO_SMALL);
  CHECK(n > 2 && vector[0] == 42.0f && vector[1] == 42.0f);
  CHECK_STATUS(petrel_embed(ctx, kPrompt, strlen(kPrompt), NULL, 2, &n),
               PETREL_ERR_INVALID_ARGUMENT);
  petrel_context_free(ctx);
}

/* Text that is not UTF-8 anywhere the API takes text. */
static void test_invalid_utf8(petrel_model* model) {
  petrel_context* ctx = NULL;
  petrel_sampling_params params = greedy(4);
  stream out = {NULL, 0, 0, 0};
  float vector[4];
  char text[64];
  size_t n = 0, len = 0;
  petrel_chat_message bad_content = {"user", "caf\xc3"};
  petrel_chat_message bad_role = {"\xff", "hi"};
  petrel_chat_message null_content = {"user", NULL};
  CHECK_STATUS(
      petrel_chat_apply_template(model, "{{ 1 }}", &bad_content, 1, 1, text, sizeof(text), &len),
      PETREL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(petrel_last_error(), "UTF-8") != NULL);
  CHECK_STATUS(
      petrel_chat_apply_template(model, "{{ 1 }}", &bad_role, 1, 1, text, sizeof(text), &len),
      PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(
      petrel_chat_apply_template(model, "{{ 1 }}", &null_content, 1, 1, text, sizeof(text), &len),
      PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_chat_apply_template(model, "{{ 1 }}", NULL, 3, 1, text, sizeof(text), &len),
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_context_new(model, NULL, &ctx), PETREL_OK);
  if (!ctx) return;
  CHECK_STATUS(petrel_embed(ctx, "\xed\xa0\x80", 3, vector, 4, &n), /* a UTF-16 surrogate */
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_generate(ctx, "\xc0\xaf", 2, &params, collect, &out, NULL), /* overlong */
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_generate_chat(ctx, "{{ 1 }}", &bad_content, 1, &params, collect, &out, NULL),
               PETREL_ERR_INVALID_ARGUMENT);
  CHECK(petrel_context_n_tokens(ctx) == 0);
  free(out.text);
  petrel_context_free(ctx);
}

/* A stream cancelled at once, then resumed twice, cancelled again, and resumed to the end. */
static void test_cancelled_resumed(petrel_model* model) {
  petrel_context* ctx = NULL;
  petrel_sampling_params params = greedy(8);
  stream out = {NULL, 0, 0, 1};
  petrel_generate_result result;
  result.struct_size = sizeof(result);
  CHECK_STATUS(petrel_context_new(model, NULL, &ctx), PETREL_OK);
  if (!ctx) return;
  CHECK_STATUS(petrel_generate(ctx, kPrompt, strlen(kPrompt), &params, collect, &out, &result),
               PETREL_ERR_CANCELLED);
  out.calls = 0;
  CHECK_STATUS(petrel_generate(ctx, "", 0, &params, collect, &out, &result), PETREL_ERR_CANCELLED);
  CHECK(result.n_prompt_tokens == 1 && result.stop_reason == PETREL_STOP_CANCELLED);
  out.cancel_after = 0;
  CHECK_STATUS(petrel_generate(ctx, "", 0, &params, collect, &out, &result), PETREL_OK);
  CHECK(result.stop_reason == PETREL_STOP_LENGTH || result.stop_reason == PETREL_STOP_EOS);
  /* A reset while nothing runs, then an empty prompt: nothing to continue. */
  CHECK_STATUS(petrel_context_reset(ctx), PETREL_OK);
  params.add_bos = 0;
  CHECK_STATUS(petrel_generate(ctx, "", 0, &params, collect, &out, &result),
               PETREL_ERR_INVALID_ARGUMENT);
  params.add_bos = 1;
  params.reserved = 1;
  CHECK_STATUS(petrel_generate(ctx, "a", 1, &params, collect, &out, &result),
               PETREL_ERR_INVALID_ARGUMENT);
  free(out.text);
  petrel_context_free(ctx);
}

int main(int argc, char** argv) {
  petrel_model* model = NULL;
  char not_a_model[4096];
  FILE* file;
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODEL SCRATCH_DIR\n", argv[0]);
    return 2;
  }
  mkdir(argv[2], 0777); /* may exist */
  snprintf(not_a_model, sizeof(not_a_model), "%s/capi_hostile_not_a_model.gguf", argv[2]);
  file = fopen(not_a_model, "wb");
  if (!file) {
    fprintf(stderr, "cannot write %s\n", not_a_model);
    return 2;
  }
  fputs("this is not a model\n", file);
  fclose(file);
  petrel_set_log_level(PETREL_LOG_SILENT); /* the refused frees would log */
  CHECK_STATUS(petrel_model_load(argv[1], NULL, &model), PETREL_OK);
  if (!model) return 1;
  test_hostile_calls(model, not_a_model);
  test_small_buffers(model);
  test_invalid_utf8(model);
  test_cancelled_resumed(model);
  petrel_model_free(model);
  test_dead_handles(argv[1]);
  remove(not_a_model);
  return report("capi_hostile_test");
}
