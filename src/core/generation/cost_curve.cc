// CostCurve: moving averages per token count, interpolated and extrapolated.
#include "core/generation/cost_curve.h"

#include <algorithm>

namespace petrel {
namespace {

// Weight of a new timing in the moving averages.
constexpr double kTimingWeight = 0.3;

}  // namespace

void CostCurve::Record(size_t tokens, double seconds) {
  if (tokens == 0 || !(seconds > 0.0)) return;
  if (tokens >= seconds_.size()) {
    const size_t max_count = seconds_.size() - 1;
    seconds *= double(max_count) / double(tokens);
    tokens = max_count;
  }
  double& average = seconds_[tokens];
  average = samples_[tokens] <= 1 ? seconds : average + kTimingWeight * (seconds - average);
  ++samples_[tokens];
}

void CostCurve::Reset() {
  std::fill(seconds_.begin(), seconds_.end(), 0.0);
  std::fill(samples_.begin(), samples_.end(), 0);
}

double CostCurve::Seconds(size_t tokens) const {
  tokens = std::max<size_t>(tokens, 1);
  if (measured(tokens)) return seconds_[tokens];
  const size_t n_max = seconds_.size() - 1;
  // The nearest measured counts below and above.
  size_t below = 0, above = 0;
  for (size_t n = std::min(tokens, n_max + 1); n-- > 1;) {
    if (seconds_[n] > 0.0) {
      below = n;
      break;
    }
  }
  for (size_t n = tokens + 1; n <= n_max; ++n) {
    if (seconds_[n] > 0.0) {
      above = n;
      break;
    }
  }
  if (below && above) {
    const double t = double(tokens - below) / double(above - below);
    return seconds_[below] + t * (seconds_[above] - seconds_[below]);
  }
  if (above) return seconds_[above] * double(tokens) / double(above);
  if (!below) return 0.0;
  size_t second = 0;
  for (size_t n = below; n-- > 1;) {
    if (seconds_[n] > 0.0) {
      second = n;
      break;
    }
  }
  const double slope =
      second ? std::max(0.0, (seconds_[below] - seconds_[second]) / double(below - second)) : 0.0;
  return seconds_[below] + slope * double(tokens - below);
}

}  // namespace petrel
