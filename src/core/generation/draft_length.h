// How many tokens speculative decoding drafts in each pass, chosen from costs measured during the
// run: the length k, 0 (a plain decode step) included, that maximises the expected tokens per
// second  E[tokens](k) / (t_catch_up(p) + (k - 1) * t_step + t_pass(k + 1)),  where a draft
// source that keeps state (a draft model) first takes in the p tokens it has fallen behind by,
// whose logits give the first drafted token, and then takes one step per further token.  A draft that is mostly rejected, or
// costs more than it saves, settles at k = 0, so turning speculation on never costs more than a
// few probes; a cheap draft that keeps being accepted drafts the longest allowed length.
// Pure arithmetic over the measurements it is given (no clock of its own): the same sequence of
// timings and verdicts gives the same choices.
#pragma once

#include <cstddef>
#include <vector>

#include "core/generation/cost_curve.h"

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
  // decode step; k + 1: the verification of k drafted tokens).
  void RecordPass(size_t tokens, double seconds) { passes_.Record(tokens, seconds); }
  // Before drafting, the source took in the `tokens` tokens it had fallen behind by (a draft
  // model: one or two after a drafting pass, more after plain steps) in `seconds`; that feed
  // gave the first drafted token.
  void RecordCatchUp(size_t tokens, double seconds) { feeds_.Record(tokens, seconds); }
  // Each drafted token after the first took the source `seconds` (a draft model's single step).
  void RecordDraft(double seconds) { feeds_.Record(1, seconds); }
  // A verification: of `drafted` tokens the first `accepted` stood.
  void RecordVerification(size_t drafted, size_t accepted);
  // Forgets every measurement and restarts the schedule, as if new.
  void Reset();

  // The model behind the choice, for tests and reports. The probability that drafted token
  // `position` (0-based) is accepted given that the ones before it were.
  double Acceptance(size_t position) const;
  // 1 + the expected number of the first k drafted tokens that stand.
  double ExpectedTokens(size_t k) const;
  // The estimated seconds of a pass of `tokens` tokens (CostCurve::Seconds).
  double PassSeconds(size_t tokens) const { return passes_.Seconds(tokens); }
  // The estimated seconds of a draft of k tokens: the catch-up on pending() tokens, then k - 1
  // steps (0 for a source whose catch-up and steps are not measured: lookup).
  double DraftSeconds(size_t k) const;
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
  // Tokens a draft source keeping state has to take in before its next draft: the tokens the
  // last pass added that it did not draft itself (1, or 2 after a draft that all stood), plus
  // one per plain step since.
  size_t pending() const { return pending_; }

 private:
  size_t draft_min_, draft_max_;
  CostCurve passes_;  // the model's forward passes of 1..draft_max + 1 tokens
  CostCurve feeds_;   // the source's catch-up feeds and steps (a step: a feed of one token)
  size_t drafting_run_ = 0;           // drafting passes since the last plain step
  size_t pending_ = 1;  // the prompt's first sampled token
  double probe_budget_ = 0.0;  // seconds: kProbeShare of plain steps' time, less probes' cost
  // Per draft position: exponentially aged counts of verifications that reached it and of
  // those that accepted its token. Aged once per pass, so evidence from long ago (before a run
  // of plain steps) weighs little against a fresh probe.
  std::vector<double> trials_, accepted_;
  size_t plain_left_ = 1;  // plain steps before the next probe; the first comes early
  size_t probe_interval_ = kMinProbeInterval;
  bool probing_ = false;
  bool probed_ = false;  // since Reset
};

}  // namespace petrel
