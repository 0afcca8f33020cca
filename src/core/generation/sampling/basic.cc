// Truncation, reshaping and selection stages: logit bias, top-k, top-p, min-p, typical-p, XTC,
// temperature (with dynamic temperature), the seeded draw and greedy choice. Each keeps at least
// one candidate.
#include <algorithm>
#include <cmath>

#include "core/generation/sampling/sampler.h"

namespace petrel {
namespace {

class LogitBias final : public SamplerStage {
 public:
  explicit LogitBias(std::map<int32_t, float> bias) : bias_(std::move(bias)) {}
  const char* Name() const override { return "logit_bias"; }
  bool Inert() const override { return bias_.empty(); }
  void Apply(Candidates& c, SamplerContext&) override {
    if (Inert()) return;
    // Candidates are still in id order when this stage runs first; look ids up either way.
    for (Candidate& item : c.items) {
      auto it = bias_.find(item.id);
      if (it != bias_.end()) item.logit += it->second;
    }
    c.sorted = false;
  }

 private:
  std::map<int32_t, float> bias_;
};

class TopK final : public SamplerStage {
 public:
  explicit TopK(int32_t k) : k_(k) {}
  const char* Name() const override { return "top_k"; }
  void Apply(Candidates& c, SamplerContext&) override {
    if (k_ <= 0 || size_t(k_) >= c.size()) return;
    c.SortFirst(size_t(k_));
  }

 private:
  int32_t k_;
};

class TopP final : public SamplerStage {
 public:
  explicit TopP(float p) : p_(p) {}
  const char* Name() const override { return "top_p"; }
  void Apply(Candidates& c, SamplerContext&) override {
    if (p_ >= 1.0f) return;
    c.Softmax();
    double cumulative = 0.0;
    for (size_t i = 0; i < c.size(); ++i) {
      cumulative += c.items[i].prob;
      if (cumulative >= p_) {
        c.KeepFirst(i + 1);
        return;
      }
    }
  }

 private:
  float p_;
};

class MinP final : public SamplerStage {
 public:
  explicit MinP(float p) : p_(p) {}
  const char* Name() const override { return "min_p"; }
  void Apply(Candidates& c, SamplerContext&) override {
    if (p_ <= 0.0f || c.size() <= 1) return;
    // p_i >= p * p_max  <=>  logit_i >= logit_max + log(p).
    const float cutoff = c.items[c.Best()].logit + std::log(p_);
    if (c.sorted) {
      size_t keep = 1;
      while (keep < c.size() && c.items[keep].logit >= cutoff) ++keep;
      c.KeepFirst(keep);
      return;
    }
    // Unsorted: keep the few above the cutoff (in their order, without a buffer) and sort only
    // those.
    std::erase_if(c.items, [&](const Candidate& item) { return !(item.logit >= cutoff); });
    c.Sort();
  }

 private:
  float p_;
};

class TypicalP final : public SamplerStage {
 public:
  explicit TypicalP(float p) : p_(p) {}
  const char* Name() const override { return "typical_p"; }
  void Apply(Candidates& c, SamplerContext&) override {
    if (p_ >= 1.0f || c.size() <= 1) return;
    c.Softmax();
    double entropy = 0.0;
    for (const Candidate& item : c.items) {
      if (item.prob > 0) entropy -= item.prob * std::log(double(item.prob));
    }
    // Keep the tokens whose surprise is closest to the expected surprise, up to mass p.
    std::vector<std::pair<double, size_t>> shifted(c.size());
    for (size_t i = 0; i < c.size(); ++i) {
      const double surprise = c.items[i].prob > 0 ? -std::log(double(c.items[i].prob)) : INFINITY;
      shifted[i] = {std::fabs(surprise - entropy), i};
    }
    std::stable_sort(shifted.begin(), shifted.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    double cumulative = 0.0;
    size_t keep = 0;
    while (keep < shifted.size()) {
      cumulative += c.items[shifted[keep].second].prob;
      ++keep;
      if (cumulative >= p_) break;
    }
    std::vector<Candidate> kept;
    for (size_t i = 0; i < keep; ++i) kept.push_back(c.items[shifted[i].second]);
    c.items = std::move(kept);
    c.sorted = false;
  }

 private:
  float p_;
};

// Top-n-sigma (Tang et al. 2024): keeps the tokens whose logit is within n standard deviations
// (over the candidates' finite logits) of the largest. It reads logits, not probabilities, so it
// is unaffected by the temperature that follows.
class TopNSigma final : public SamplerStage {
 public:
  explicit TopNSigma(float n) : n_(n) {}
  const char* Name() const override { return "top_n_sigma"; }
  void Apply(Candidates& c, SamplerContext&) override {
    if (n_ <= 0.0f || c.size() <= 1) return;
    double sum = 0.0;
    size_t finite = 0;
    const float max_logit = c.items[c.Best()].logit;
    for (const Candidate& item : c.items) {
      if (item.logit == -INFINITY) continue;
      sum += item.logit;
      ++finite;
    }
    if (finite == 0) return;
    const double mean = sum / double(finite);
    double squares = 0.0;
    for (const Candidate& item : c.items) {
      if (item.logit != -INFINITY) squares += (item.logit - mean) * (item.logit - mean);
    }
    const float cutoff = max_logit - n_ * float(std::sqrt(squares / double(finite)));
    // Removal keeps the order, so a sorted list stays sorted; the largest always stays.
    std::erase_if(c.items, [&](const Candidate& item) { return item.logit < cutoff; });
  }

 private:
  float n_;
};

class Xtc final : public SamplerStage {
 public:
  Xtc(float probability, float threshold) : probability_(probability), threshold_(threshold) {}
  const char* Name() const override { return "xtc"; }
  void Apply(Candidates& c, SamplerContext& context) override {
    if (probability_ <= 0.0f || threshold_ > 0.5f || c.size() < 2) return;
    if (context.Uniform() >= probability_) return;
    c.Softmax();
    // Remove every token above the threshold except the least likely of them.
    size_t above = 0;
    while (above < c.size() && c.items[above].prob >= threshold_) ++above;
    if (above < 2) return;
    c.items.erase(c.items.begin(), c.items.begin() + long(above - 1));
  }

 private:
  float probability_, threshold_;
};

class Temperature final : public SamplerStage {
 public:
  Temperature(float t, float range, float exponent) : t_(t), range_(range), exponent_(exponent) {}
  const char* Name() const override { return "temperature"; }
  void Apply(Candidates& c, SamplerContext&) override {
    float t = t_;
    if (range_ > 0.0f && c.size() > 1) {
      // Dynamic temperature: scale between t - range and t + range by normalised entropy.
      c.Softmax();
      double entropy = 0.0;
      for (const Candidate& item : c.items) {
        if (item.prob > 0) entropy -= item.prob * std::log(double(item.prob));
      }
      const double normalised = entropy / std::log(double(c.size()));
      const float low = std::max(0.0f, t_ - range_), high = t_ + range_;
      t = low + (high - low) * float(std::pow(normalised, double(exponent_)));
    }
    if (t <= 0.0f) {
      c.items = {c.items[c.Best()]};
      c.sorted = true;
      return;
    }
    for (Candidate& item : c.items) item.logit /= t;
  }

 private:
  float t_, range_, exponent_;
};

class Dist final : public SamplerStage {
 public:
  const char* Name() const override { return "dist"; }
  void Apply(Candidates&, SamplerContext&) override {}
  int32_t Select(Candidates& c, SamplerContext& context) override {
    c.Softmax();
    double total = 0.0;
    for (const Candidate& item : c.items) total += item.prob;
    const double u = context.Uniform() * total;
    double acc = 0.0;
    for (const Candidate& item : c.items) {
      acc += item.prob;
      if (u < acc) return item.id;
    }
    return c.items.back().id;
  }
};

class Greedy final : public SamplerStage {
 public:
  const char* Name() const override { return "greedy"; }
  bool PicksArgMax() const override { return true; }
  void Apply(Candidates&, SamplerContext&) override {}
  int32_t Select(Candidates& c, SamplerContext&) override { return c.items[c.Best()].id; }
};

}  // namespace

std::unique_ptr<SamplerStage> MakeLogitBias(std::map<int32_t, float> bias) { return std::make_unique<LogitBias>(std::move(bias)); }
std::unique_ptr<SamplerStage> MakeTopK(int32_t k) { return std::make_unique<TopK>(k); }
std::unique_ptr<SamplerStage> MakeTopP(float p) { return std::make_unique<TopP>(p); }
std::unique_ptr<SamplerStage> MakeMinP(float p) { return std::make_unique<MinP>(p); }
std::unique_ptr<SamplerStage> MakeTypicalP(float p) { return std::make_unique<TypicalP>(p); }
std::unique_ptr<SamplerStage> MakeTopNSigma(float n) { return std::make_unique<TopNSigma>(n); }
std::unique_ptr<SamplerStage> MakeXtc(float probability, float threshold) { return std::make_unique<Xtc>(probability, threshold); }
std::unique_ptr<SamplerStage> MakeTemperature(float t, float range, float exponent) { return std::make_unique<Temperature>(t, range, exponent); }
std::unique_ptr<SamplerStage> MakeDist() { return std::make_unique<Dist>(); }
std::unique_ptr<SamplerStage> MakeGreedy() { return std::make_unique<Greedy>(); }

int32_t ArgMax(const float* values, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i) {
    if (values[i] > values[best]) best = i;
  }
  return int32_t(best);
}

}  // namespace petrel
