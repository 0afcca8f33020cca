/* petrel_decode_batch as a C program uses it: two prompts decoded together, greedy on the
 * returned logits, give the tokens each gives alone, and the text petrel_generate gives; a bad
 * sequence is refused on its own while the other advances; a batch that cannot run changes
 * nothing.
 *
 * Usage: capi_batch_test MODEL */
#include <petrel/petrel.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

#define STEPS 12
#define MAX_IDS 64

static const char* const kPrompts[2] = {"Once upon a time", "One day, a little girl"};

typedef struct {
  int32_t ids[MAX_IDS + STEPS];
  size_t n_prompt;
  size_t n;
} text_ids;

static size_t argmax(const float* logits, size_t n) {
  size_t best = 0, i;
  for (i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

/* Greedy decoding of `n_texts` texts as sequences 0.. of `ctx`, all in one batch per step. */
static void greedy_batch(petrel_context* ctx, text_ids* texts, size_t n_texts, size_t n_vocab) {
  petrel_batch_sequence items[2];
  petrel_batch batch;
  float* logits = (float*)malloc(2 * n_vocab * sizeof(float));
  size_t step, i;
  if (!logits) return;
  batch.struct_size = sizeof(batch);
  batch.sequences = items;
  batch.n_sequences = n_texts;
  for (step = 0; step < STEPS; ++step) {
    for (i = 0; i < n_texts; ++i) {
      /* First the whole prompt, then the token sampled last. */
      size_t from = step == 0 ? 0 : texts[i].n - 1;
      items[i].seq = (uint32_t)i;
      items[i].tokens = texts[i].ids + from;
      items[i].n_tokens = texts[i].n - from;
      items[i].logits = logits + i * n_vocab;
      items[i].status = PETREL_ERR_INTERNAL;
    }
    CHECK_STATUS(petrel_decode_batch(ctx, &batch), PETREL_OK);
    for (i = 0; i < n_texts; ++i) {
      CHECK(items[i].status == PETREL_OK);
      texts[i].ids[texts[i].n++] = (int32_t)argmax(items[i].logits, n_vocab);
    }
  }
  free(logits);
}

static void tokenize(const petrel_model* model, const char* text, text_ids* out) {
  memset(out, 0, sizeof(*out));
  CHECK_STATUS(petrel_tokenize(model, text, strlen(text), PETREL_TOKENIZE_ADD_SPECIAL, out->ids,
                               MAX_IDS, &out->n),
               PETREL_OK);
  out->n_prompt = out->n;
}

static petrel_context* new_context(petrel_model* model, uint32_t n_sequences) {
  petrel_context* ctx = NULL;
  petrel_context_params params = petrel_context_default_params();
  params.n_threads = 2;
  params.context = 256;
  params.n_sequences = n_sequences;
  CHECK_STATUS(petrel_context_new(model, &params, &ctx), PETREL_OK);
  return ctx;
}

/* Batched, each text's tokens are those it gets alone; the first one's text is
 * petrel_generate's. */
static void test_batch_matches_alone(petrel_model* model) {
  const size_t n_vocab = (size_t)petrel_model_n_vocab(model);
  text_ids together[2], alone;
  petrel_context* pair = new_context(model, 2);
  petrel_context* single = new_context(model, 1);
  size_t i;
  if (!pair || !single) return;
  for (i = 0; i < 2; ++i) tokenize(model, kPrompts[i], &together[i]);
  greedy_batch(pair, together, 2, n_vocab);
  /* Sequence 0 is the context's text: its prompt and every token fed since. */
  CHECK(petrel_context_n_tokens(pair) == together[0].n - 1);
  for (i = 0; i < 2; ++i) {
    tokenize(model, kPrompts[i], &alone);
    CHECK_STATUS(petrel_context_reset(single), PETREL_OK);
    greedy_batch(single, &alone, 1, n_vocab);
    CHECK(alone.n == together[i].n &&
          memcmp(alone.ids, together[i].ids, alone.n * sizeof(int32_t)) == 0);
  }
  {
    stream generated = {NULL, 0, 0, 0};
    petrel_sampling_params params = greedy(STEPS);
    char decoded[1024];
    size_t len = 0;
    CHECK_STATUS(petrel_context_reset(single), PETREL_OK);
    CHECK_STATUS(petrel_generate(single, kPrompts[0], strlen(kPrompts[0]), &params, collect,
                                 &generated, NULL),
                 PETREL_OK);
    CHECK_STATUS(petrel_detokenize(model, together[0].ids + together[0].n_prompt, STEPS, 0,
                                   decoded, sizeof(decoded), &len),
                 PETREL_OK);
    CHECK(generated.text && strcmp(generated.text, decoded) == 0);
    if (generated.text && strcmp(generated.text, decoded) != 0)
      fprintf(stderr, "generated [%s]\nbatched [%s]\n", generated.text, decoded);
    free(generated.text);
  }
  CHECK_STATUS(petrel_context_reset(pair), PETREL_OK);
  CHECK(petrel_context_n_tokens(pair) == 0);
  petrel_context_free(single);
  petrel_context_free(pair);
}

/* A sequence with an id outside the vocabulary is refused alone; a batch naming a sequence the
 * context does not hold is refused whole. */
static void test_refusals(petrel_model* model) {
  petrel_context* ctx = new_context(model, 2);
  int32_t good[2] = {1, 2};
  int32_t bad[1] = {-5};
  petrel_batch_sequence items[2];
  petrel_batch batch;
  if (!ctx) return;
  memset(items, 0, sizeof(items));
  batch.struct_size = sizeof(batch);
  batch.sequences = items;
  batch.n_sequences = 2;
  items[0].seq = 1;
  items[0].tokens = bad;
  items[0].n_tokens = 1;
  items[1].seq = 0;
  items[1].tokens = good;
  items[1].n_tokens = 2;
  CHECK_STATUS(petrel_decode_batch(ctx, &batch), PETREL_ERR_INVALID_ARGUMENT);
  CHECK(items[0].status == PETREL_ERR_INVALID_ARGUMENT && items[1].status == PETREL_OK);
  CHECK(petrel_context_n_tokens(ctx) == 2);
  items[0].seq = 2; /* the context holds sequences 0 and 1 */
  items[0].tokens = good;
  CHECK_STATUS(petrel_decode_batch(ctx, &batch), PETREL_ERR_INVALID_ARGUMENT);
  CHECK(petrel_context_n_tokens(ctx) == 2);
  CHECK_STATUS(petrel_decode_batch(ctx, NULL), PETREL_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(petrel_decode_batch(NULL, &batch), PETREL_ERR_INVALID_ARGUMENT);
  petrel_context_free(ctx);
}

int main(int argc, char** argv) {
  petrel_model* model = NULL;
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL\n", argv[0]);
    return 2;
  }
  CHECK_STATUS(petrel_model_load(argv[1], NULL, &model), PETREL_OK);
  if (!model) return 1;
  test_batch_matches_alone(model);
  test_refusals(model);
  petrel_model_free(model);
  return report("capi_batch_test");
}
