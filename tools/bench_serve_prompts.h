// The prompt set of `petrel bench-serve`: pseudo-sentences of common English words drawn with a
// seeded generator, so that prompts differ from their first word on (the prefix cache cannot
// serve one from another) unless a shared prefix is asked for. Each is sized to about the
// target token count with the server's own /tokenize, whose count the replies' usage must match.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace petrel::tools {

struct BenchPrompt {
  std::string text;
  size_t tokens = 0;  // as /tokenize counts them, BOS included
};

struct PromptSetOptions {
  size_t count = 1;
  size_t tokens = 100;              // per prompt, shared prefix included
  size_t shared_prefix_tokens = 0;  // a common first part of every prompt
  uint64_t seed = 1;
};

Result<std::vector<BenchPrompt>> BuildPromptSet(const std::string& url, const std::string& api_key,
                                                const PromptSetOptions& options);

}  // namespace petrel::tools
