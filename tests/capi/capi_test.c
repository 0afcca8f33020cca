/* The C API as a C program sees it: built against the installed header and library (via
 * pkg-config) by run_capi_test.sh. Checks greedy text against `petrel run`'s stdout, streaming
 * with cancellation and resumption, two contexts on two threads at once, chat templates,
 * embeddings, a saved and loaded session, LoRA's errors. Hostile use is capi_hostile_test.c's.
 *
 * Usage: capi_test MODEL EXPECTED_STDOUT_FILE NOT_A_MODEL_FILE SCRATCH_FILE */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <petrel/petrel.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

static const char kPrompt[] = "Once upon a time";

/* `petrel run -p PROMPT -n 32 --temp 0` prints the text and a newline. */
static int matches_run(const stream* out, const char* expected) {
  size_t n = strlen(expected);
  return n == out->len + 1 && expected[n - 1] == '\n' && memcmp(expected, out->text, out->len) == 0;
}

static void test_tokenize(const petrel_model* model) {
  size_t n = 0, len = 0;
  int32_t ids[64];
  char text[256];
  CHECK_STATUS(
      petrel_tokenize(model, kPrompt, strlen(kPrompt), PETREL_TOKENIZE_ADD_SPECIAL, NULL, 0, &n),
      PETREL_ERR_BUFFER_TOO_SMALL);
  CHECK(n >= 4 && n <= 64);
  {
    size_t needed = n;
    CHECK_STATUS(petrel_tokenize(model, kPrompt, strlen(kPrompt), PETREL_TOKENIZE_ADD_SPECIAL, ids,
                                 needed - 1, &n),
                 PETREL_ERR_BUFFER_TOO_SMALL);
    CHECK(n == needed);
    CHECK_STATUS(
        petrel_tokenize(model, kPrompt, strlen(kPrompt), PETREL_TOKENIZE_ADD_SPECIAL, ids, 64, &n),
        PETREL_OK);
    CHECK(n == needed);
  }
  CHECK_STATUS(petrel_detokenize(model, ids, n, 0, text, sizeof(text), &len), PETREL_OK);
  CHECK(len == strlen(kPrompt) && strcmp(text, kPrompt) == 0);
  /* Room for the text but not its NUL. */
  CHECK_STATUS(petrel_detokenize(model, ids, n, 0, text, len, &len), PETREL_ERR_BUFFER_TOO_SMALL);
  CHECK(len == strlen(kPrompt));
  CHECK(petrel_model_n_vocab(model) > 0);
}

static void test_greedy_matches_run(petrel_model* model, const char* expected) {
  petrel_context* ctx = NULL;
  stream out = {NULL, 0, 0, 0};
  petrel_sampling_params params = greedy(32);
  petrel_generate_result result;
  result.struct_size = sizeof(result);
  CHECK_STATUS(petrel_context_new(model, NULL, &ctx), PETREL_OK);
  if (!ctx) return;
  CHECK_STATUS(petrel_generate(ctx, kPrompt, strlen(kPrompt), &params, collect, &out, &result),
               PETREL_OK);
  CHECK(out.text && matches_run(&out, expected));
  if (out.text && !matches_run(&out, expected))
    fprintf(stderr, "got [%s]\nexpected [%s]\n", out.text, expected);
  CHECK(result.stop_reason == PETREL_STOP_LENGTH || result.stop_reason == PETREL_STOP_EOS);
  CHECK(result.n_generated_tokens > 0 && result.n_generated_tokens <= 32);
  /* After a reset the same call gives the same text. */
  CHECK_STATUS(petrel_context_reset(ctx), PETREL_OK);
  CHECK(petrel_context_n_tokens(ctx) == 0);
  free(out.text);
  memset(&out, 0, sizeof(out));
  CHECK_STATUS(petrel_generate(ctx, kPrompt, strlen(kPrompt), &params, collect, &out, NULL),
               PETREL_OK);
  CHECK(out.text && matches_run(&out, expected));
  free(out.text);
  petrel_context_free(ctx);
}

/* Cancelled after 5 tokens, then resumed with an empty prompt: the two parts are the text of
 * one uncancelled generation. */
static void test_cancel_and_resume(petrel_model* model, const char* expected) {
  petrel_context* ctx = NULL;
  stream first = {NULL, 0, 0, 5};
  stream rest = {NULL, 0, 0, 0};
  petrel_sampling_params params = greedy(32);
  petrel_generate_result result;
  result.struct_size = sizeof(result);
  CHECK_STATUS(petrel_context_new(model, NULL, &ctx), PETREL_OK);
  if (!ctx) return;
  CHECK_STATUS(petrel_generate(ctx, kPrompt, strlen(kPrompt), &params, collect, &first, &result),
               PETREL_ERR_CANCELLED);
  CHECK(result.stop_reason == PETREL_STOP_CANCELLED);
  CHECK(result.n_generated_tokens == 5);
  CHECK(first.text && strncmp(expected, first.text, first.len) == 0);
  params.max_tokens = 32 - 5;
  CHECK_STATUS(petrel_generate(ctx, "", 0, &params, collect, &rest, &result), PETREL_OK);
  CHECK(result.n_prompt_tokens == 1); /* the token sampled last, fed now */
  {
    size_t total = first.len + rest.len;
    char* joined = (char*)malloc(total + 1);
    stream whole = {joined, total, 0, 0};
    if (joined) {
      memcpy(joined, first.text, first.len);
      if (rest.len) memcpy(joined + first.len, rest.text, rest.len);
      joined[total] = '\0';
      CHECK(matches_run(&whole, expected));
      if (!matches_run(&whole, expected))
        fprintf(stderr, "resumed [%s]\nexpected [%s]\n", joined, expected);
    }
    free(joined);
  }
  free(first.text);
  free(rest.text);
  petrel_context_free(ctx);
}

typedef struct {
  const petrel_model* model;
  petrel_context* ctx;
  stream out;
  petrel_status status;
} worker;

static void* run_worker(void* arg) {
  worker* job = (worker*)arg;
  petrel_sampling_params params = greedy(32);
  int32_t ids[64];
  size_t n = 0;
  int i;
  /* The shared model tokenizes for both threads meanwhile. */
  for (i = 0; i < 50; ++i) {
    if (petrel_tokenize(job->model, kPrompt, strlen(kPrompt), PETREL_TOKENIZE_ADD_SPECIAL, ids, 64,
                        &n) != PETREL_OK) {
      job->status = PETREL_ERR_INTERNAL;
      return NULL;
    }
  }
  job->status =
      petrel_generate(job->ctx, kPrompt, strlen(kPrompt), &params, collect, &job->out, NULL);
  return NULL;
}

/* One model, two contexts, two threads at once. */
static void test_two_threads(petrel_model* model, const char* expected) {
  worker jobs[2];
  pthread_t threads[2];
  int i;
  petrel_context_params params = petrel_context_default_params();
  params.n_threads = 1;
  memset(jobs, 0, sizeof(jobs));
  for (i = 0; i < 2; ++i) CHECK_STATUS(petrel_context_new(model, &params, &jobs[i].ctx), PETREL_OK);
  if (!jobs[0].ctx || !jobs[1].ctx) return;
  for (i = 0; i < 2; ++i) {
    jobs[i].model = model;
    CHECK(pthread_create(&threads[i], NULL, run_worker, &jobs[i]) == 0);
  }
  for (i = 0; i < 2; ++i) pthread_join(threads[i], NULL);
  for (i = 0; i < 2; ++i) {
    CHECK(jobs[i].status == PETREL_OK);
    CHECK(jobs[i].out.text && matches_run(&jobs[i].out, expected));
    free(jobs[i].out.text);
    petrel_context_free(jobs[i].ctx);
  }
}

/* A callback that calls back into its own context. */
/* A template given as text renders messages; generate_chat's reply is petrel_generate's on the
 * rendered text, and the next turn feeds only what is new. The story model has no template of
 * its own. */
static const char kTemplate[] =
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

static void test_chat(petrel_model* model) {
  petrel_chat_message turn1[1] = {{"user", "Tell me a story about a dog."}};
  petrel_chat_message turn2[3] = {
      {"user", "Tell me a story about a dog."}, {"assistant", NULL}, {"user", "And a cat?"}};
  const char rendered1[] = "user: Tell me a story about a dog.\nassistant:";
  char text[256];
  size_t len = 0;
  petrel_context* ctx = NULL;
  petrel_context* plain = NULL;
  stream chat = {NULL, 0, 0, 0};
  stream direct = {NULL, 0, 0, 0};
  stream next = {NULL, 0, 0, 0};
  petrel_sampling_params params = greedy(12);
  petrel_generate_result result;
  result.struct_size = sizeof(result);

  CHECK_STATUS(petrel_chat_apply_template(model, kTemplate, turn1, 1, 1, text, sizeof(text), &len),
               PETREL_OK);
  CHECK(len == strlen(rendered1) && strcmp(text, rendered1) == 0);
  CHECK_STATUS(petrel_chat_apply_template(model, kTemplate, turn1, 1, 1, text, 8, &len),
               PETREL_ERR_BUFFER_TOO_SMALL);
  CHECK(len == strlen(rendered1));
  CHECK_STATUS(petrel_chat_apply_template(model, NULL, turn1, 1, 1, text, sizeof(text), &len),
               PETREL_ERR_STATE);
  CHECK_STATUS(
      petrel_chat_apply_template(model, "{% for %}", turn1, 1, 1, text, sizeof(text), &len),
      PETREL_ERR_INVALID_ARGUMENT);

  CHECK_STATUS(petrel_context_new(model, NULL, &ctx), PETREL_OK);
  CHECK_STATUS(petrel_context_new(model, NULL, &plain), PETREL_OK);
  if (!ctx || !plain) return;
  CHECK_STATUS(petrel_generate_chat(ctx, kTemplate, turn1, 1, &params, collect, &chat, &result),
               PETREL_OK);
  CHECK_STATUS(
      petrel_generate(plain, rendered1, strlen(rendered1), &params, collect, &direct, NULL),
      PETREL_OK);
  CHECK(chat.text && direct.text && strcmp(chat.text, direct.text) == 0);
  if (chat.text && direct.text && strcmp(chat.text, direct.text) != 0)
    fprintf(stderr, "chat [%s]\ndirect [%s]\n", chat.text, direct.text);
  {
    /* The second turn: the first turn's rows are kept, only the new part is fed. */
    int32_t ids[256];
    size_t n_ids = 0;
    turn2[1].content = chat.text ? chat.text : "";
    CHECK_STATUS(
        petrel_chat_apply_template(model, kTemplate, turn2, 3, 1, text, sizeof(text), &len),
        PETREL_OK);
    CHECK_STATUS(petrel_tokenize(model, text, len, PETREL_TOKENIZE_ADD_SPECIAL, ids, 256, &n_ids),
                 PETREL_OK);
    CHECK_STATUS(petrel_generate_chat(ctx, kTemplate, turn2, 3, &params, collect, &next, &result),
                 PETREL_OK);
    CHECK(result.n_prompt_tokens > 0 && result.n_prompt_tokens + 10 < n_ids);
  }
  free(chat.text);
  free(direct.text);
  free(next.text);
  petrel_context_free(plain);
  petrel_context_free(ctx);
}

/* One unit-length vector per text, the same for the same text, the conversation kept. */
static void test_embed(petrel_model* model) {
  petrel_context* ctx = NULL;
  stream out = {NULL, 0, 0, 0};
  petrel_sampling_params params = greedy(4);
  float first[1024], second[1024];
  size_t n = 0, i;
  double norm = 0.0, diff = 0.0;
  size_t held;
  CHECK_STATUS(petrel_context_new(model, NULL, &ctx), PETREL_OK);
  if (!ctx) return;
  CHECK_STATUS(petrel_generate(ctx, kPrompt, strlen(kPrompt), &params, collect, &out, NULL),
               PETREL_OK);
  held = petrel_context_n_tokens(ctx);
  CHECK_STATUS(petrel_embed(ctx, kPrompt, strlen(kPrompt), NULL, 0, &n),
               PETREL_ERR_BUFFER_TOO_SMALL);
  CHECK(n > 0 && n <= 1024);
  if (n == 0 || n > 1024) return;
  CHECK_STATUS(petrel_embed(ctx, kPrompt, strlen(kPrompt), first, n, &n), PETREL_OK);
  CHECK_STATUS(petrel_embed(ctx, kPrompt, strlen(kPrompt), second, n, &n), PETREL_OK);
  for (i = 0; i < n; ++i) {
    norm += (double)first[i] * first[i];
    diff += fabs((double)first[i] - second[i]);
  }
  CHECK(fabs(norm - 1.0) < 1e-3);
  CHECK(diff == 0.0);
  CHECK_STATUS(petrel_embed(ctx, "A dog ran.", 10, second, n, &n), PETREL_OK);
  diff = 0.0;
  for (i = 0; i < n; ++i) diff += fabs((double)first[i] - second[i]);
  CHECK(diff > 1e-3);
  CHECK(petrel_context_n_tokens(ctx) == held);
  free(out.text);
  petrel_context_free(ctx);
}

/* Saved after 5 tokens, loaded into a new context, resumed: the text of one generation. */
static void test_session(petrel_model* model, const char* expected, const char* scratch_file,
                         const char* not_a_model) {
  petrel_context* saver = NULL;
  petrel_context* loader = NULL;
  stream first = {NULL, 0, 0, 0};
  stream rest = {NULL, 0, 0, 0};
  petrel_sampling_params params = greedy(5);
  CHECK_STATUS(petrel_context_new(model, NULL, &saver), PETREL_OK);
  CHECK_STATUS(petrel_context_new(model, NULL, &loader), PETREL_OK);
  if (!saver || !loader) return;
  CHECK_STATUS(petrel_generate(saver, kPrompt, strlen(kPrompt), &params, collect, &first, NULL),
               PETREL_OK);
  CHECK_STATUS(petrel_context_save(saver, scratch_file), PETREL_OK);
  petrel_context_free(saver);
  CHECK_STATUS(petrel_context_load(loader, "/nonexistent/session.bin"), PETREL_ERR_IO);
  CHECK_STATUS(petrel_context_load(loader, not_a_model), PETREL_ERR_FORMAT);
  CHECK(petrel_context_n_tokens(loader) == 0);
  CHECK_STATUS(petrel_context_load(loader, scratch_file), PETREL_OK);
  params.max_tokens = 32 - 5;
  CHECK_STATUS(petrel_generate(loader, "", 0, &params, collect, &rest, NULL), PETREL_OK);
  {
    size_t total = first.len + rest.len;
    char* joined = (char*)malloc(total + 1);
    stream whole = {joined, total, 0, 0};
    if (joined) {
      memcpy(joined, first.text, first.len);
      if (rest.len) memcpy(joined + first.len, rest.text, rest.len);
      joined[total] = '\0';
      CHECK(matches_run(&whole, expected));
      if (!matches_run(&whole, expected))
        fprintf(stderr, "loaded [%s]\nexpected [%s]\n", joined, expected);
    }
    free(joined);
  }
  free(first.text);
  free(rest.text);
  petrel_context_free(loader);
}

/* LoRA adapters are read when the context is made: a missing file is an I/O error, a file that
 * is not an adapter a backend one (the text of an adapter is checked by test_capi.py). */
static void test_lora_errors(petrel_model* model, const char* not_a_model) {
  petrel_context* ctx = NULL;
  petrel_context_params params = petrel_context_default_params();
  const char* missing[1] = {"/nonexistent/adapter.gguf"};
  const char* junk[1];
  junk[0] = not_a_model;
  params.lora = missing;
  params.n_lora = 1;
  CHECK_STATUS(petrel_context_new(model, &params, &ctx), PETREL_ERR_IO);
  params.lora = junk;
  CHECK_STATUS(petrel_context_new(model, &params, &ctx), PETREL_ERR_BACKEND);
  params.lora = NULL;
  CHECK_STATUS(petrel_context_new(model, &params, &ctx), PETREL_ERR_INVALID_ARGUMENT);
  CHECK(ctx == NULL);
}

int main(int argc, char** argv) {
  petrel_model* model = NULL;
  char* expected;
  if (argc != 5) {
    fprintf(stderr, "usage: %s MODEL EXPECTED_STDOUT_FILE NOT_A_MODEL_FILE SCRATCH_FILE\n",
            argv[0]);
    return 2;
  }
  expected = read_file(argv[2]);
  if (!expected || !*expected) {
    fprintf(stderr, "cannot read %s\n", argv[2]);
    return 2;
  }
  CHECK(petrel_version()[0] != '\0');
  CHECK(strcmp(petrel_status_name(PETREL_ERR_IO), "PETREL_ERR_IO") == 0);
  CHECK(strcmp(petrel_status_name((petrel_status)99), "unknown status") == 0);
  CHECK_STATUS(petrel_model_load(argv[1], NULL, &model), PETREL_OK);
  if (!model) return 1;
  test_tokenize(model);
  test_greedy_matches_run(model, expected);
  test_cancel_and_resume(model, expected);
  test_two_threads(model, expected);
  test_chat(model);
  test_embed(model);
  test_session(model, expected, argv[4], argv[3]);
  test_lora_errors(model, argv[3]);
  petrel_model_free(model);
  free(expected);
  return report("capi_test");
}
