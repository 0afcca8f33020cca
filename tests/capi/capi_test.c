/* The C API as a C program sees it: built against the installed header and library (via
 * pkg-config) by run_capi_test.sh. Checks greedy text against `petrel run`'s stdout, streaming
 * with cancellation and resumption, two contexts on two threads at once, and hostile use (NULL
 * handles, small buffers, bad UTF-8, bad params structs): error codes and messages, no crash.
 * Clean under AddressSanitizer: CAPI_TEST_CFLAGS="-fsanitize=address,undefined -g" (see
 * docs/LIBRARY.md).
 *
 * Usage: capi_test MODEL EXPECTED_STDOUT_FILE NOT_A_MODEL_FILE */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <petrel.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                            \
    }                                                                          \
  } while (0)

/* `call` returns `code` and leaves a one-line message. */
#define CHECK_STATUS(call, code)                                                              \
  do {                                                                                        \
    petrel_status got_ = (call);                                                              \
    if (got_ != (code)) {                                                                     \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__, #call, \
              petrel_status_name(got_), petrel_status_name(code), petrel_last_error());       \
      ++g_failures;                                                                           \
    } else if ((code) != PETREL_OK) {                                                         \
      const char* message_ = petrel_last_error();                                             \
      CHECK(message_ != NULL && message_[0] != '\0' && strchr(message_, '\n') == NULL);       \
    }                                                                                         \
  } while (0)

/* Text collected from a stream; cancels after `cancel_after` callbacks when that is not 0. */
typedef struct {
  char* text;
  size_t len;
  size_t calls;
  size_t cancel_after;
} stream;

static int collect(const char* text, size_t len, void* user_data) {
  stream* out = (stream*)user_data;
  char* grown = (char*)realloc(out->text, out->len + len + 1);
  if (!grown) return 1;
  out->text = grown;
  if (len > 0) memcpy(out->text + out->len, text, len);
  out->len += len;
  out->text[out->len] = '\0';
  out->calls++;
  return out->cancel_after != 0 && out->calls >= out->cancel_after;
}

static char* read_file(const char* path) {
  FILE* file = fopen(path, "rb");
  char* text;
  long size;
  if (!file) return NULL;
  fseek(file, 0, SEEK_END);
  size = ftell(file);
  fseek(file, 0, SEEK_SET);
  text = (char*)calloc((size_t)size + 1, 1);
  if (text && fread(text, 1, (size_t)size, file) != (size_t)size) {
    free(text);
    text = NULL;
  }
  fclose(file);
  return text;
}

static const char kPrompt[] = "Once upon a time";

static petrel_sampling_params greedy(int32_t max_tokens) {
  petrel_sampling_params params = petrel_sampling_default_params();
  params.temperature = 0.0f;
  params.max_tokens = max_tokens;
  params.seed = 1;
  return params;
}

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
static petrel_status g_reentrant_status = PETREL_OK;
static int reenter(const char* text, size_t len, void* user_data) {
  petrel_sampling_params params = greedy(1);
  (void)text;
  (void)len;
  g_reentrant_status =
      petrel_generate((petrel_context*)user_data, "x", 1, &params, collect, NULL, NULL);
  return 1;
}

static void test_hostile(petrel_model* model, const char* not_a_model) {
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

int main(int argc, char** argv) {
  petrel_model* model = NULL;
  char* expected;
  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL EXPECTED_STDOUT_FILE NOT_A_MODEL_FILE\n", argv[0]);
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
  test_hostile(model, argv[3]);
  petrel_model_free(model);
  free(expected);
  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("capi_test: all checks passed\n");
  return 0;
}
