// How many tokens speculative decoding drafts in each pass, chosen from costs measured during the
// run: the length k, 0 (a plain decode step) included, that maximises the expected tokens per
// second  E[tokens](k) / (k * t_draft + t_pass(k + 1)).  A draft that is mostly rejected, or
// costs more than it saves, settles at k = 0, so turning speculation on never costs more than a
// few probes; a cheap draft that keeps being accepted drafts the longest allowed length.
// Pure arithmetic over the measurements it is given (no clock of its own): the same sequence of
// timings and verdicts gives the same choices.
#pragma once

#include <cstddef>
#include <vector>

namespace petrel {

class DraftLengthChooser {
 public:
  // With `draft_min` 0 the choice may be 0 (do not draft); above 0 every pass drafts at least
  // that many tokens, whatever the costs (a user's override). Needs draft_min <= draft_max.
  DraftLengthChooser(size_t draft_min, size_t draft_max);

  // The draft length of the next pass, at most `limit` (what the context, the token limit and
  // the batch leave); call once per pass, as it advances the probe schedule and ages the
  // acceptance evidence. While drafting does not pay it returns 0, but every so many plain
  // steps a one-token probe (probing() is then true) checks whether the draft has started to
  // agree: at most one probe per kMinProbeInterval plain steps (<= 5 % of the steps), the
  // interval doubling up to kMaxProbeInterval while probes are rejected, and only while the
  // probes' estimated cost (catch-up, draft, the longer pass) stays within kProbeShare of the
  // time spent in plain steps. A draft model that is slow to catch up is thus probed at the
  // start and then rarely or never, rather than making plain decoding slower.
  size_t Choose(size_t limit);
  bool probing() const { return probing_; }

  // A forward pass of the model over `tokens` tokens of one sequence took `seconds` (1: a plain
  // decode step; k + 1: the verification of k drafted tokens). Moving averages, except that
  // the second sample of a count replaces the first, which often includes a warm-up.
  void RecordPass(size_t tokens, double seconds);
  // Drafting took `seconds` per drafted token (a draft model's single steps; ~0 for lookup).
  void RecordDraft(double seconds_per_token);
  // Before drafting, the source took in `tokens` tokens it had fallen behind (a draft model
  // after plain steps) in `seconds`. A draft after m plain steps is charged m times this per
  // token, so that resuming, and probing, a draft model that must catch up is weighed at its
  // cost.
  void RecordCatchUp(size_t tokens, double seconds);
  // A verification: of `drafted` tokens the first `accepted` stood.
  void RecordVerification(size_t drafted, size_t accepted);
  // Forgets every measurement and restarts the schedule, as if new.
  void Reset();

  // The model behind the choice, for tests and reports. The probability that drafted token
  // `position` (0-based) is accepted given that the ones before it were.
  double Acceptance(size_t position) const;
  // 1 + the expected number of the first k drafted tokens that stand.
  double ExpectedTokens(size_t k) const;
  // The estimated seconds of a pass of `tokens` tokens: measured where measured, else linear
  // between measured counts; past the longest one measured, along the slope of the last two
  // (or, with only one, proportional to the count: a guess that drafting does not pay, left to
  // the probes to correct). 0 when nothing is measured.
  double PassSeconds(size_t tokens) const;
  // Seconds per drafted token: measured, else a token of catch-up (a draft model's first
  // draft comes after it took in the prompt; a single step costs at least that), else 0.
  double DraftSeconds() const { return draft_measured_ ? draft_seconds_ : catch_up_seconds_; }
  // Expected tokens per second of drafting k tokens (k = 0: a plain step); 0 without timings.
  double TokensPerSecond(size_t k) const;

  // The shortest run of plain steps between two probes, and the longest.
  static constexpr size_t kMinProbeInterval = 20;
  static constexpr size_t kMaxProbeInterval = 80;
  // While drafting, a plain step every this many passes re-measures a plain step's time (the
  // k = 0 that drafts are weighed against), first after kFirstRefresh: the first sample of a
  // run is often slow (caches cold after the prompt).
  static constexpr size_t kRefreshInterval = 64;
  static constexpr size_t kFirstRefresh = 4;
  // The share of plain decoding's time that probes may cost.
  static constexpr double kProbeShare = 0.05;
  // The estimated extra seconds of a probe now.
  double ProbeSeconds() const;
  // Tokens a draft source has fallen behind by: the plain steps since the last draft.
  size_t behind() const { return behind_; }

 private:
  size_t draft_min_, draft_max_;
  // pass_seconds_[n]: exponential moving average of an n-token pass (n in 1..draft_max + 1); 0
  // until measured.
  std::vector<double> pass_seconds_;
  std::vector<size_t> pass_samples_;  // samples taken of each; the second replaces the first
  size_t drafting_run_ = 0;           // drafting passes since the last plain step
  double draft_seconds_ = 0.0;        // per drafted token; 0 until measured (assumed free)
  bool draft_measured_ = false;
  double catch_up_seconds_ = 0.0;  // per token a draft source takes in after plain steps
  size_t behind_ = 0;
  double probe_budget_ = 0.0;  // seconds: kProbeShare of plain steps' time, less probes' cost
  // Per draft position: exponentially aged counts of verifications that reached it and of
  // those that accepted its token. Aged once per pass, so evidence from long ago (before a run
  // of plain steps) weighs little against a fresh probe.
  std::vector<double> trials_, accepted_;
  size_t plain_left_ = 1;  // plain steps before the next probe; the first comes early
  size_t probe_interval_ = kMinProbeInterval;
  bool probing_ = false;
};

}  // namespace petrel
