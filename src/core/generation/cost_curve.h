// The measured seconds of an operation whose cost depends on a count of tokens (a forward pass
// over n tokens, a draft model taking in n tokens): a moving average per count, and between and
// beyond the measured counts an estimate from its neighbours. The draft-length choice weighs
// such curves against each other (draft_length.h).
#pragma once

#include <cstddef>
#include <vector>

namespace petrel {

class CostCurve {
 public:
  // Keeps averages for counts 1..max_count; a sample of a larger count is kept as max_count
  // tokens at the same cost per token (a feed that long is bound by compute, linear in its
  // tokens).
  explicit CostCurve(size_t max_count) : seconds_(max_count + 1, 0.0), samples_(max_count + 1, 0) {}

  // `tokens` took `seconds`. Moving averages, except that the second sample of a count replaces
  // the first, which often includes a warm-up (caches cold, pages not yet touched).
  void Record(size_t tokens, double seconds);
  // The estimated seconds for `tokens` (at least 1): measured where measured, else linear
  // between measured counts; past the largest measured count, along the slope of the last two
  // (flat with only one: an operation bound by one read of the weights costs about the same for
  // a few more tokens); below the smallest, proportional to the count. 0 when nothing is
  // measured.
  double Seconds(size_t tokens) const;
  bool measured(size_t tokens) const { return tokens < seconds_.size() && seconds_[tokens] > 0.0; }
  size_t samples(size_t tokens) const { return tokens < samples_.size() ? samples_[tokens] : 0; }
  void Reset();

 private:
  std::vector<double> seconds_;  // [n]: average for n tokens; 0 until measured
  std::vector<size_t> samples_;
};

}  // namespace petrel
