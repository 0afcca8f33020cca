// Stop strings matched on generated text across token boundaries: text that could still become
// a stop string is held back, and the stop string itself is never emitted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace petrel {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds decoded text; returns the part that is now safe to emit.
  std::string Push(std::string_view text);
  // End of generation without a stop: the held-back text.
  std::string Flush();

  bool matched() const { return matched_; }
  const std::string& matched_stop() const { return matched_stop_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool matched_ = false;
  std::string matched_stop_;
};

}  // namespace petrel
