/* What the C API test programs share: CHECK macros that count failures, CHECK_STATUS that also
 * checks the one-line message, a stream that collects (and can cancel) generated text, and
 * reading a file. Header-only: each program is one C file. */
#ifndef PETREL_TESTS_CAPI_CHECK_H_
#define PETREL_TESTS_CAPI_CHECK_H_

#include <petrel/petrel.h>
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

static inline int collect(const char* text, size_t len, void* user_data) {
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

static inline char* read_file(const char* path) {
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

static inline petrel_sampling_params greedy(int32_t max_tokens) {
  petrel_sampling_params params = petrel_sampling_default_params();
  params.temperature = 0.0f;
  params.max_tokens = max_tokens;
  params.seed = 1;
  return params;
}

/* Exit status: 0 when every check passed. */
static inline int report(const char* program) {
  if (g_failures) {
    fprintf(stderr, "%s: %d checks failed\n", program, g_failures);
    return 1;
  }
  printf("%s: all checks passed\n", program);
  return 0;
}

#endif /* PETREL_TESTS_CAPI_CHECK_H_ */
