// NgramLookup: a backwards scan for the context's last n tokens; what followed is the draft.
#include "core/generation/ngram_lookup.h"

#include <algorithm>

namespace petrel {

Status NgramLookup::Propose(std::span<const int32_t> context, size_t max_tokens, Draft* draft) {
  draft->Clear();
  const size_t length = context.size();
  if (max_tokens == 0 || length < 2) return Status::Ok();
  for (size_t n = std::min(max_ngram_, length - 1); n >= 1; --n) {
    const std::span<const int32_t> pattern = context.subspan(length - n, n);
    if (std::any_of(pattern.begin(), pattern.end(), [](int32_t id) { return id < 0; })) continue;
    // Most recent occurrence first: the latest repetition is the likeliest to go on.
    for (size_t start = length - n; start-- > 0;) {
      if (!std::equal(pattern.begin(), pattern.end(), context.begin() + long(start))) continue;
      for (size_t i = start + n; i < length && draft->tokens.size() < max_tokens; ++i) {
        if (context[i] < 0) break;
        draft->tokens.push_back(context[i]);
      }
      return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace petrel
