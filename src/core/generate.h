// The generation loop: prefill a prompt, then sample one token at a time until a stop.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/engine.h"
#include "core/sampling/sampler.h"

namespace petrel {

struct GenerateOptions {
  size_t max_new_tokens = 64;
  SamplingParams sampling;
  bool stop_at_end_of_generation = true;
};

struct GenerateResult {
  std::vector<int32_t> new_ids;   // includes the end-of-generation token when it stopped there
  std::string stop_reason;        // "eos", "length", "context", "callback"
  size_t prompt_tokens = 0;
  double prompt_seconds = 0.0;
  double generate_seconds = 0.0;
};

// `on_token` is called for each new token; returning false stops generation.
Result<GenerateResult> Generate(Engine& engine, SeqId seq, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options,
                                const std::function<bool(int32_t)>& on_token);

}  // namespace petrel
