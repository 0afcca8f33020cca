// DraftLengthChooser: the cost model (pass times, draft time, acceptance per position) and the
// choice that maximises expected tokens per second, with probes while not drafting.
#include "core/generation/draft_length.h"

#include <algorithm>

namespace petrel {
namespace {

// Weight of the past in the acceptance counts, per pass: about the last ten passes count, so
// that the length follows a text whose predictability changes.
constexpr double kAcceptanceDecay = 0.9;
// Pseudo-observations of a position's prior: 0 for the first drafted token (drafting has to be
// earned by a probe that stands), the previous position's estimate beyond (a draft that agrees
// on one token tends to agree on the next). Small, so that measured rates are barely biased.
constexpr double kPriorWeight = 0.25;
// A position counts as measured while its aged count of trials is at least this (about the
// last six passes); the draft grows at most to twice the measured depth, so that one probe
// that happens to stand does not start a long draft on no evidence.
constexpr double kMeasured = 0.5;
}  // namespace

DraftLengthChooser::DraftLengthChooser(size_t draft_min, size_t draft_max)
    : draft_min_(draft_min),
      draft_max_(draft_max),
      passes_(draft_max + 1),
      // Catch-ups as long as the longest run of plain steps between probes and a draft's; a
      // prompt's is kept at that length.
      feeds_(kMaxProbeInterval + draft_max + 2),
      trials_(draft_max, 0.0),
      accepted_(draft_max, 0.0) {}

void DraftLengthChooser::Reset() {
  passes_.Reset();
  feeds_.Reset();
  drafting_run_ = 0;
  std::fill(trials_.begin(), trials_.end(), 0.0);
  std::fill(accepted_.begin(), accepted_.end(), 0.0);
  pending_ = 1;
  probe_budget_ = 0.0;
  plain_left_ = 1;
  probe_interval_ = kMinProbeInterval;
  probing_ = false;
  probed_ = false;
}

void DraftLengthChooser::RecordVerification(size_t drafted, size_t accepted) {
  drafted = std::min(drafted, draft_max_);
  accepted = std::min(accepted, drafted);
  // Positions before the first rejection stood; the rejected one did not; later ones were not
  // reached, so they say nothing.
  // A draft model drafted and took in all but the last drafted token: it lacks the tokens after
  // the first rejected one (the model's own), or the last drafted one and the model's next.
  pending_ = accepted == drafted ? 2 : 1;
  for (size_t i = 0; i < drafted && i <= accepted; ++i) {
    trials_[i] += 1.0;
    if (i < accepted) accepted_[i] += 1.0;
  }
  if (probing_ && drafted > 0) {
    // A probe that stood restarts the schedule at its shortest interval; a rejected one waits
    // the current interval and doubles the next.
    if (accepted > 0) probe_interval_ = kMinProbeInterval;
    plain_left_ = probe_interval_;
    if (accepted == 0) probe_interval_ = std::min(2 * probe_interval_, kMaxProbeInterval);
  }
}

double DraftLengthChooser::Acceptance(size_t position) const {
  double estimate = 0.0;  // position 0's prior
  for (size_t i = 0; i <= position && i < trials_.size(); ++i) {
    estimate = (accepted_[i] + kPriorWeight * estimate) / (trials_[i] + kPriorWeight);
  }
  return estimate;
}

double DraftLengthChooser::ExpectedTokens(size_t k) const {
  double expected = 1.0, reach = 1.0, estimate = 0.0;
  for (size_t i = 0; i < k && i < trials_.size(); ++i) {
    estimate = (accepted_[i] + kPriorWeight * estimate) / (trials_[i] + kPriorWeight);
    reach *= estimate;
    expected += reach;
  }
  return expected;
}

double DraftLengthChooser::DraftSeconds(size_t k) const {
  if (k == 0) return 0.0;
  return feeds_.Seconds(pending_) + double(k - 1) * feeds_.Seconds(1);
}

double DraftLengthChooser::TokensPerSecond(size_t k) const {
  // A pass of more tokens is never taken to cost less than a plain step, whatever the noise in
  // the two averages: a draft that is never accepted must not look cheaper than not drafting.
  const double seconds = DraftSeconds(k) + std::max(PassSeconds(k + 1), PassSeconds(1));
  return seconds > 0.0 ? ExpectedTokens(k) / seconds : 0.0;
}

double DraftLengthChooser::ProbeSeconds() const {
  return DraftSeconds(1) + std::max(0.0, PassSeconds(2) - PassSeconds(1));
}

size_t DraftLengthChooser::Choose(size_t limit) {
  probing_ = false;
  for (size_t i = 0; i < trials_.size(); ++i) {
    trials_[i] *= kAcceptanceDecay;
    accepted_[i] *= kAcceptanceDecay;
  }
  limit = std::min(limit, draft_max_);
  if (limit == 0) {
    ++pending_;  // a plain step
    drafting_run_ = 0;
    return 0;
  }
  const size_t lowest = std::min(draft_min_, limit);
  if (lowest == 0 && drafting_run_ >= (passes_.samples(1) < 2 ? kFirstRefresh : kRefreshInterval)) {
    drafting_run_ = 0;  // a plain step to re-measure
    ++pending_;
    return 0;
  }
  size_t measured = 0;
  while (measured < trials_.size() && trials_[measured] >= kMeasured) ++measured;
  const size_t highest = std::max(lowest, std::min(limit, std::max<size_t>(1, 2 * measured)));
  size_t best = lowest;
  if (lowest > 0 || passes_.measured(1)) {  // else a plain step measures one first
    double best_rate = TokensPerSecond(lowest);
    for (size_t k = lowest + 1; k <= highest; ++k) {
      const double rate = TokensPerSecond(k);
      if (rate > best_rate) {  // ties go to the shorter draft: less work for the same
        best = k;
        best_rate = rate;
      }
    }
  }
  if (best > 0) {
    plain_left_ = probe_interval_;
    ++drafting_run_;
    return best;
  }
  if (plain_left_ == 0 && (!probed_ || probe_budget_ >= ProbeSeconds())) {
    // Probe: one drafted token. Its verdict (RecordVerification) sets the next interval; a
    // probe that got no draft from its source leaves plain_left_ at 0, so the next pass probes
    // again. The first probe, one plain step after the prompt, goes ahead on credit: its
    // catch-up is one or two tokens, the cheapest a probe gets, and the budget repays it.
    probe_budget_ -= ProbeSeconds();
    probed_ = true;
    probing_ = true;
    return 1;
  }
  if (plain_left_ > 0) --plain_left_;
  drafting_run_ = 0;
  probe_budget_ += kProbeShare * PassSeconds(1);
  ++pending_;
  return 0;
}

}  // namespace petrel
