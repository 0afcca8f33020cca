/* simple.c: load a model, stream a greedy continuation of a prompt to stdout, free.
 *
 *   cc simple.c $(pkg-config --cflags --libs petrel) -o simple
 *   ./simple MODEL [PROMPT]      (MODEL: a GGUF file or a Hugging Face folder) */
#include <petrel/petrel.h>
#include <stdio.h>
#include <string.h>

/* Called as text is generated; returning nonzero would stop (PETREL_ERR_CANCELLED). */
static int print_piece(const char* text, size_t len, void* user_data) {
  (void)user_data;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return 0;
}

int main(int argc, char** argv) {
  const char* prompt = argc > 2 ? argv[2] : "Once upon a time";
  petrel_model* model = NULL;
  petrel_context* ctx = NULL;
  petrel_sampling_params params = petrel_sampling_default_params();
  petrel_status status;
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL [PROMPT]\n", argv[0]);
    return 2;
  }
  status = petrel_model_load(argv[1], NULL, &model);
  if (status == PETREL_OK) status = petrel_context_new(model, NULL, &ctx);
  if (status == PETREL_OK) {
    params.temperature = 0.0f; /* greedy: the same text as `petrel run --temp 0` */
    params.max_tokens = 32;
    fputs(prompt, stdout);
    status = petrel_generate(ctx, prompt, strlen(prompt), &params, print_piece, NULL, NULL);
    putchar('\n');
  }
  if (status != PETREL_OK) fprintf(stderr, "error: %s\n", petrel_last_error());
  petrel_context_free(ctx); /* contexts before their model; NULL is fine */
  petrel_model_free(model);
  return status == PETREL_OK ? 0 : 1;
}
