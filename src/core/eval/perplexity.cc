// llama-perplexity's windows and statistics; KL divergence between two distributions.
#include "core/eval/perplexity.h"

#include <algorithm>
#include <cmath>

namespace petrel {

Result<ChunkPlan> PlanChunks(size_t n_tokens, size_t n_ctx) {
  if (n_ctx < kMinPerplexityContext) {
    return Error("a window of %zu tokens is too short: perplexity needs -c of at least %zu", n_ctx,
                 kMinPerplexityContext);
  }
  if (n_tokens < n_ctx) {
    return Error("the text has %zu tokens, fewer than one window of %zu (-c)", n_tokens, n_ctx);
  }
  ChunkPlan plan;
  plan.n_ctx = n_ctx;
  plan.n_chunks = n_tokens / n_ctx;
  plan.first = n_ctx / 2;
  return plan;
}

std::vector<int32_t> ChunkTokens(std::span<const int32_t> text, const ChunkPlan& plan, size_t index,
                                 int32_t bos) {
  const auto begin = text.begin() + ptrdiff_t(index * plan.n_ctx);
  std::vector<int32_t> tokens(begin, begin + ptrdiff_t(plan.n_ctx));
  if (bos >= 0) tokens[0] = bos;
  return tokens;
}

double LogProbOf(std::span<const float> logits, int32_t token) {
  float max_logit = logits[0];
  for (const float logit : logits) max_logit = std::max(max_logit, logit);
  double sum_exp = 0.0;
  for (const float logit : logits) sum_exp += std::exp(logit - max_logit);
  return double(logits[size_t(token)] - max_logit) - std::log(sum_exp);
}

void LogSoftmax(std::span<const float> logits, std::span<float> out) {
  float max_logit = logits[0];
  for (const float logit : logits) max_logit = std::max(max_logit, logit);
  double sum_exp = 0.0;
  for (const float logit : logits) sum_exp += std::exp(logit - max_logit);
  const double log_sum_exp = std::log(sum_exp);
  for (size_t i = 0; i < logits.size(); ++i) {
    out[i] = float(double(logits[i] - max_logit) - log_sum_exp);
  }
}

int32_t Argmax(std::span<const float> values) {
  return int32_t(std::max_element(values.begin(), values.end()) - values.begin());
}

double NllStats::variance() const {
  if (count_ == 0) return 0.0;
  const double m = mean();
  return std::max(0.0, sum_sq_ / double(count_) - m * m);
}

double NllStats::Perplexity() const { return std::exp(mean()); }

double NllStats::PerplexityUncertainty() const {
  if (count_ < 2) return 0.0;
  return Perplexity() * std::sqrt(variance() / double(count_ - 1));
}

double KlDivergence(std::span<const float> base_log_probs, std::span<const float> logits) {
  float max_logit = logits[0];
  for (const float logit : logits) max_logit = std::max(max_logit, logit);
  double sum_exp = 0.0;
  for (const float logit : logits) sum_exp += std::exp(double(logit - max_logit));
  const double log_sum_exp = std::log(sum_exp);
  double kld = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double base = base_log_probs[i];
    const double model = double(logits[i] - max_logit) - log_sum_exp;
    kld += std::exp(base) * (base - model);
  }
  // Rounding can leave a tiny negative sum for identical distributions; KL is never negative.
  return std::max(0.0, kld);
}

void KldStats::Add(double kld, bool same_top, double base_nll, double nll) {
  base_.Add(base_nll);
  model_.Add(nll);
  sum_cross_ += base_nll * nll;
  kld_sum_ += kld;
  kld_sum_sq_ += kld * kld;
  max_kld_ = std::max(max_kld_, kld);
  same_top_ += same_top ? 1 : 0;
}

Estimate KldStats::MeanKld() const {
  const size_t n = count();
  if (n == 0) return {};
  const double mean = kld_sum_ / double(n);
  const double variance = std::max(0.0, kld_sum_sq_ / double(n) - mean * mean);
  return {mean, n > 1 ? std::sqrt(variance / double(n - 1)) : 0.0};
}

Estimate KldStats::SameTopPercent() const {
  const size_t n = count();
  if (n == 0) return {};
  const double p = double(same_top_) / double(n);
  return {100.0 * p, n > 1 ? 100.0 * std::sqrt(p * (1.0 - p) / double(n - 1)) : 0.0};
}

Estimate KldStats::DeltaPerplexity() const {
  const size_t n = count();
  if (n == 0) return {};
  const double ppl = model_.Perplexity();
  const double ppl_base = base_.Perplexity();
  if (n < 2) return {ppl - ppl_base, 0.0};
  // Standard errors of the two mean NLLs and their covariance, carried through exp.
  const double covariance = sum_cross_ / double(n) - model_.mean() * base_.mean();
  const double scale = 1.0 / double(n - 1);
  const double variance = ppl * ppl * model_.variance() * scale +
                          ppl_base * ppl_base * base_.variance() * scale -
                          2.0 * ppl * ppl_base * covariance * scale;
  return {ppl - ppl_base, std::sqrt(std::max(0.0, variance))};
}

Estimate KldStats::MeanLogPerplexityRatio() const {
  const size_t n = count();
  if (n == 0) return {};
  const double covariance = sum_cross_ / double(n) - model_.mean() * base_.mean();
  // var(nll - base_nll) = var(nll) + var(base_nll) - 2 cov.
  const double variance = model_.variance() + base_.variance() - 2.0 * covariance;
  return {model_.mean() - base_.mean(),
          n > 1 ? std::sqrt(std::max(0.0, variance) / double(n - 1)) : 0.0};
}

}  // namespace petrel
