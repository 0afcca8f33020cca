// Tokenizer base: the out-of-line destructor that anchors the vtable.
#include "core/tokenizer/tokenizer.h"

#include <algorithm>

namespace petrel {

Tokenizer::~Tokenizer() = default;

bool OverlapsSpan(const std::vector<TextSpan>& spans, size_t begin, size_t end) {
  // The first span that ends after `begin` is the only one that can overlap.
  const auto it = std::upper_bound(spans.begin(), spans.end(), begin,
                                   [](size_t pos, const TextSpan& span) { return pos < span.end; });
  return it != spans.end() && it->begin < end;
}

}  // namespace petrel
