// `petrel bench --draft MODEL` / `--lookup-ngram N`: greedy generation from one prompt with and
// without speculative decoding, side by side: tokens/s, acceptance rate, tokens per model
// pass, and whether the two outputs are the same token for token.
#pragma once

#include <string>

#include "tools/common.h"
#include "tools/draft_options.h"

namespace petrel::tools {

struct SpeculativeBench {
  ModelOptions model;  // threads already chosen
  DraftOptions draft;
  std::string prompt;  // text; tokenized with the model's tokenizer
  size_t n_gen = 128;
  size_t repetitions = 5;
  bool json = false;
};

// Runs the two tests, each once to warm up and then `repetitions` times, alternating so that a
// shared host's load falls on both alike; prints a table or JSON lines. Returns the exit code.
int RunSpeculativeBench(const SpeculativeBench& bench);

}  // namespace petrel::tools
