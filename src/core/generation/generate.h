// The generation loop: prefill a prompt, then sample one token at a time until a stop: an
// end-of-generation token, a stop string (matched on text across tokens), the token limit, the
// context, or the caller.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/runtime/engine.h"
#include "core/generation/sampling/sampler.h"

namespace petrel {

struct GenerateOptions {
  size_t max_new_tokens = 64;
  size_t min_new_tokens = 0;        // end-of-generation tokens are banned before this many
  bool ignore_eos = false;          // ban end-of-generation tokens altogether
  std::vector<std::string> stop;    // stop strings; the matched one is not part of the text
  SamplingParams sampling;
  bool skip_special = true;         // leave special tokens out of the text
};

struct GeneratedToken {
  int32_t id;
  float logprob;
  std::vector<TokenLogprob> top;
};

struct GenerateResult {
  std::vector<int32_t> new_ids;   // includes the end-of-generation token when it stopped there
  std::vector<GeneratedToken> tokens;
  std::string text;               // what was emitted: stop strings and held-back text excluded
  std::string stop_reason;        // "eos", "stop", "length", "context", "cancelled"
  std::string stop_string;        // for "stop"
  size_t prompt_tokens = 0;       // fed to the model in this call
  double prompt_seconds = 0.0;
  double generate_seconds = 0.0;
};

// Called with each token and the text it releases (possibly empty); return false to stop.
using TokenCallback = std::function<bool(const GeneratedToken& token, std::string_view text)>;

// Continues `seq` with `prompt` (which may be only the part not already in its KV cache) and
// generates. Needs the engine's tokenizer for text; without one, text stays empty.
Result<GenerateResult> Generate(Engine& engine, SeqId seq, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options, const TokenCallback& on_token);

}  // namespace petrel
