// The arithmetic of `petrel perplexity`, kept apart from the engine so that it can be tested on
// hand-made logits: llama-perplexity's windows over a tokenized text, log-softmax with its
// numerics, the running negative log-likelihood and its uncertainty, and the statistics of a
// model's distributions compared with a base model's (KL divergence, top-token agreement, Δppl).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/base/status.h"

namespace petrel {

// A text of n tokens cut as llama-perplexity cuts it: floor(n / n_ctx) chunks of n_ctx tokens
// (the tail is dropped), each evaluated from an empty cache; only the second half of each chunk
// is scored, so every scored token is predicted from at least n_ctx / 2 tokens of context.
struct ChunkPlan {
  size_t n_ctx = 0;
  size_t n_chunks = 0;
  size_t first = 0;  // n_ctx / 2: the logits at first … n_ctx-2 predict tokens first+1 … n_ctx-1
  size_t scored_per_chunk() const { return n_ctx - 1 - first; }
  size_t scored() const { return n_chunks * scored_per_chunk(); }
};

// The smallest window that scores two tokens (one would leave the uncertainty undefined).
inline constexpr size_t kMinPerplexityContext = 6;

// Errors: a window below kMinPerplexityContext, or a text shorter than one window.
Result<ChunkPlan> PlanChunks(size_t n_tokens, size_t n_ctx);

// The tokens of chunk `index` as evaluated: text[index*n_ctx, (index+1)*n_ctx), the first one
// replaced by `bos` when bos >= 0 (llama-perplexity starts every window with BOS when the model
// adds one, so that each window looks like the start of a document).
std::vector<int32_t> ChunkTokens(std::span<const int32_t> text, const ChunkPlan& plan, size_t index,
                                 int32_t bos);

// log softmax(logits)[token], computed as llama-perplexity does (max subtracted, exp in float,
// summed in double) so that figures agree to the last printed digit.
double LogProbOf(std::span<const float> logits, int32_t token);
// The whole log-softmax row into `out` (same size as logits).
void LogSoftmax(std::span<const float> logits, std::span<float> out);
// Index of the largest value; the first of equal ones.
int32_t Argmax(std::span<const float> values);

// Running mean of negative log-likelihoods and llama-perplexity's figures from it.
class NllStats {
 public:
  void Add(double nll) {
    sum_ += nll;
    sum_sq_ += nll * nll;
    ++count_;
  }
  size_t count() const { return count_; }
  double mean() const { return count_ ? sum_ / double(count_) : 0.0; }
  // Population variance of the NLLs.
  double variance() const;
  double Perplexity() const;  // exp(mean NLL)
  // PPL × sqrt(var / (count - 1)): the standard error of the mean NLL carried through exp. 0 with
  // fewer than two values.
  double PerplexityUncertainty() const;

 private:
  double sum_ = 0;
  double sum_sq_ = 0;
  size_t count_ = 0;
};

// KL(base ‖ model) at one position, in nats: base_log_probs are the base model's normalised
// log-probabilities, logits the compared model's raw logits (same vocabulary).
double KlDivergence(std::span<const float> base_log_probs, std::span<const float> logits);

// A value and the standard error of its estimate.
struct Estimate {
  double value = 0;
  double uncertainty = 0;
};

// Statistics of a model compared with a base model over the same scored positions.
class KldStats {
 public:
  // One position: its KL divergence, whether both models' most likely token is the same, and
  // each model's NLL of the text's actual next token.
  void Add(double kld, bool same_top, double base_nll, double nll);

  size_t count() const { return model_.count(); }
  const NllStats& base() const { return base_; }
  const NllStats& model() const { return model_; }
  Estimate MeanKld() const;
  double MaxKld() const { return max_kld_; }
  Estimate SameTopPercent() const;
  // PPL(model) - PPL(base), its uncertainty from both variances and their covariance (the two
  // NLLs of a position are strongly correlated, so the difference is known far better than
  // either perplexity).
  Estimate DeltaPerplexity() const;
  Estimate MeanLogPerplexityRatio() const;  // mean of nll - base_nll = ln(PPL(model)/PPL(base))

 private:
  NllStats base_;
  NllStats model_;
  double sum_cross_ = 0;  // Σ base_nll × nll, for the covariance
  double kld_sum_ = 0;
  double kld_sum_sq_ = 0;
  double max_kld_ = 0;
  size_t same_top_ = 0;
};

}  // namespace petrel
