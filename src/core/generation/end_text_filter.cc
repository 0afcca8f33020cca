// EndTextFilter: markers found and removed across pieces, partial ones held back.
#include "core/generation/end_text_filter.h"

#include <algorithm>

#include "core/tokenizer/tokenizer.h"

namespace petrel {

EndTextFilter::EndTextFilter(const Tokenizer* tokenizer, bool keep) {
  if (!tokenizer || keep) return;
  for (size_t id = 0; id < tokenizer->n_vocab(); ++id) {
    if (!tokenizer->IsEndOfGeneration(int32_t(id))) continue;
    const std::string text(tokenizer->TokenText(int32_t(id)));
    // A one-character marker would eat ordinary text.
    if (text.size() >= 2 && std::find(markers_.begin(), markers_.end(), text) == markers_.end()) {
      markers_.push_back(text);
    }
  }
}

std::string EndTextFilter::Push(std::string_view text) {
  if (markers_.empty()) return std::string(text);
  held_.append(text);
  std::string out;
  for (;;) {
    size_t first = std::string::npos;
    size_t length = 0;
    for (const std::string& marker : markers_) {
      const size_t at = held_.find(marker);
      if (at < first) {
        first = at;
        length = marker.size();
      }
    }
    if (first == std::string::npos) break;
    out.append(held_, 0, first);
    held_.erase(0, first + length);
  }
  // Keep the longest tail that may still grow into a marker.
  size_t keep = 0;
  for (const std::string& marker : markers_) {
    for (size_t n = std::min(marker.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, marker, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  out.append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string EndTextFilter::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace petrel
