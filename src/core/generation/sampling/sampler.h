// The sampler layer: a chain of small stages over host logits, built from SamplingParams (or a
// JSON request), ending in a seeded draw or greedy choice. It never sees a backend.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/generation/sampling/candidates.h"
#include "core/base/status.h"

namespace petrel {

struct SamplingParams {
  float temperature = 0.8f;        // <= 0: greedy (after bias and penalties)
  int32_t top_k = 40;              // <= 0: off
  float top_p = 0.95f;             // >= 1: off
  float min_p = 0.05f;             // <= 0: off
  float typical_p = 1.0f;          // >= 1: off
  float top_n_sigma = -1.0f;       // <= 0: off; keeps logits within n std devs of the largest
  float dynatemp_range = 0.0f;     // > 0: temperature varies with entropy in [t - r, t + r]
  float dynatemp_exponent = 1.0f;
  float xtc_probability = 0.0f;    // > 0: "exclude top choices" with this probability
  float xtc_threshold = 0.1f;
  float repeat_penalty = 1.0f;     // 1: off
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t penalty_last_n = 64;     // look-back window of the three penalties; -1: whole history
  float dry_multiplier = 0.0f;     // > 0: DRY repetition penalty on
  float dry_base = 1.75f;
  int32_t dry_allowed_length = 2;
  int32_t dry_penalty_last_n = -1; // -1: whole history (capped at 4096 tokens)
  std::vector<std::string> dry_sequence_breakers = {"\n", ":", "\"", "*"};
  int32_t mirostat = 0;            // 2: mirostat v2 replaces the truncation stages and the draw
  float mirostat_tau = 5.0f;
  float mirostat_eta = 0.1f;
  std::map<int32_t, float> logit_bias;  // added to the logit; -inf bans a token
  uint64_t seed = 0;
  // Stage order; empty: the default order (see DefaultSamplerOrder()).
  std::vector<std::string> order;
  int32_t n_probs = 0;             // top alternatives to report with each token
  // GBNF grammar the generated text must match (docs/GRAMMARS.md); empty: unconstrained. JSON
  // schemas are converted to one before they get here. The Sequence compiles it against the
  // tokenizer's vocabulary and puts its mask first in the chain (SamplerChain::SetConstraint).
  std::string grammar;
};

struct TokenLogprob {
  int32_t id;
  float logprob;  // natural log of the probability under the full softmax of the raw logits
};

struct SampleResult {
  int32_t id = -1;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // n_probs most likely tokens
};

// State shared by the stages of one sequence.
struct SamplerContext {
  std::mt19937_64 rng;
  std::vector<int32_t> history;  // prompt and generated tokens, in order
  // Text of a token (DRY's sequence breakers need it); may be empty.
  std::function<std::string_view(int32_t)> token_text;
  // A uniform draw in [0, 1) from 53 random bits: the same on every platform.
  double Uniform() { return double(rng() >> 11) * (1.0 / 9007199254740992.0); }
};

class SamplerStage {
 public:
  virtual ~SamplerStage() = default;
  virtual const char* Name() const = 0;
  virtual void Apply(Candidates& candidates, SamplerContext& context) = 0;
  // Final stages pick the token; others return -1.
  virtual int32_t Select(Candidates&, SamplerContext&) { return -1; }
  virtual void Accept(int32_t /*token*/) {}
  // Apply leaves any candidates as they are (an empty bias, neutral penalties, DRY off).
  virtual bool Inert() const { return false; }
  // Select picks the first of the largest logits (greedy), whatever the context.
  virtual bool PicksArgMax() const { return false; }
};

class SamplerChain {
 public:
  // Builds the chain; unknown stage names or out-of-range values are errors, never ignored.
  static Result<std::unique_ptr<SamplerChain>> Create(const SamplingParams& params);

  void SetTokenText(std::function<std::string_view(int32_t)> token_text);
  // Puts `stage` (a mask that removes the tokens a constraint forbids) right after the logit
  // bias, before every stage that reshapes or truncates, and lets it see each accepted token.
  void SetConstraint(std::unique_ptr<SamplerStage> stage);
  // Prompt tokens count for the penalties as llama.cpp does.
  void AddHistory(const std::vector<int32_t>& tokens);
  SampleResult Sample(const float* logits, size_t n_vocab);
  // Speculative decoding: the same step as Sample(), given a drafted token `draft` that was
  // drawn from `draft_probs` (n_vocab probabilities; empty: chosen deterministically, a point
  // mass). With the chain's distribution p and the draft's q, the draft is accepted with
  // probability min(1, p(draft) / q(draft)); otherwise the token is drawn from the residual
  // max(0, p - q), normalised. Either way the returned token is distributed exactly as
  // Sample()'s. A greedy chain returns its argmax, and a mirostat chain (whose state follows
  // each draw) its own draw; both accept the draft when it is that token. `*accepted` says
  // whether the returned token is the draft.
  SampleResult SampleDraft(const float* logits, size_t n_vocab, int32_t draft,
                           std::span<const float> draft_probs, bool* accepted);
  // Records the chosen token in the history (Sample() calls it itself).
  void Accept(int32_t token);
  const SamplingParams& params() const { return params_; }
  std::vector<std::string> StageNames() const;

 private:
  SamplerChain() = default;
  // The result for `chosen` (log-probabilities under the raw logits, the top alternatives),
  // recorded in the history.
  SampleResult Chosen(const float* logits, size_t n_vocab, int32_t chosen);
  SamplingParams params_;
  std::vector<std::unique_ptr<SamplerStage>> stages_;
  SamplerContext context_;
  Candidates candidates_;
};

std::vector<std::string> DefaultSamplerOrder();
// Every stage name the factory knows (the tests list them all).
std::vector<std::string> KnownSamplerStages();
// Parses "top_k;top_p;temperature" (also ',' separated).
Result<std::vector<std::string>> ParseSamplerOrder(std::string_view text);
// Reads OpenAI/llama.cpp-style request fields into `params`; unknown sampling fields are left to
// the caller, unsupported values are errors naming the field.
Status SamplingParamsFromJson(const nlohmann::json& request, SamplingParams* params);

// Index of the largest value; the lowest index wins ties.
int32_t ArgMax(const float* values, size_t n);

// The stage constructors, for the factory and the tests.
std::unique_ptr<SamplerStage> MakeLogitBias(std::map<int32_t, float> bias);
std::unique_ptr<SamplerStage> MakePenalties(float repeat, float frequency, float presence, int32_t last_n);
std::unique_ptr<SamplerStage> MakeDry(float multiplier, float base, int32_t allowed_length,
                                      int32_t last_n, std::vector<std::string> breakers);
std::unique_ptr<SamplerStage> MakeTopK(int32_t k);
std::unique_ptr<SamplerStage> MakeTopP(float p);
std::unique_ptr<SamplerStage> MakeMinP(float p);
std::unique_ptr<SamplerStage> MakeTypicalP(float p);
std::unique_ptr<SamplerStage> MakeTopNSigma(float n);
std::unique_ptr<SamplerStage> MakeXtc(float probability, float threshold);
std::unique_ptr<SamplerStage> MakeTemperature(float temperature, float dyn_range, float dyn_exponent);
std::unique_ptr<SamplerStage> MakeMirostatV2(float tau, float eta);
std::unique_ptr<SamplerStage> MakeDist();
std::unique_ptr<SamplerStage> MakeGreedy();

}  // namespace petrel
