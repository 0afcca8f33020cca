// StopMatcher: earliest full match wins; otherwise hold back the longest suffix that is a
// prefix of some stop string.
#include "core/generation/stop_matcher.h"

#include <algorithm>

namespace petrel {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& stop : stops) {
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
}

std::string StopMatcher::Push(std::string_view text) {
  if (matched_) return "";
  pending_.append(text);
  size_t earliest = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t at = pending_.find(stop);
    if (at < earliest) {
      earliest = at;
      matched_stop_ = stop;
    }
  }
  if (earliest != std::string::npos) {
    matched_ = true;
    std::string out = pending_.substr(0, earliest);
    pending_.clear();
    return out;
  }
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, pending_.size());
    for (size_t length = longest; length > hold; --length) {
      if (pending_.compare(pending_.size() - length, length, stop, 0, length) == 0) {
        hold = length;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::Flush() {
  std::string out;
  out.swap(pending_);
  return matched_ ? std::string() : out;
}

}  // namespace petrel
