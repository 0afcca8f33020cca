// Repetition stages over the sequence's history: repetition / frequency / presence penalties
// (llama.cpp semantics) and DRY ("don't repeat yourself": penalise the token that would extend a
// sequence already seen earlier in the context).
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/generation/sampling/sampler.h"

namespace petrel {
namespace {

class Penalties final : public SamplerStage {
 public:
  Penalties(float repeat, float frequency, float presence, int32_t last_n)
      : repeat_(repeat), frequency_(frequency), presence_(presence), last_n_(last_n) {}
  const char* Name() const override { return "penalties"; }
  bool Inert() const override {
    return (repeat_ == 1.0f && frequency_ == 0.0f && presence_ == 0.0f) || last_n_ == 0;
  }
  void Apply(Candidates& c, SamplerContext& context) override {
    if (Inert() || context.history.empty()) return;
    const size_t window = last_n_ < 0 ? context.history.size()
                                      : std::min(context.history.size(), size_t(last_n_));
    counts_.clear();
    for (size_t i = context.history.size() - window; i < context.history.size(); ++i) {
      ++counts_[context.history[i]];
    }
    for (Candidate& item : c.items) {
      auto it = counts_.find(item.id);
      if (it == counts_.end()) continue;
      // Dividing a positive logit and multiplying a negative one both make the token less likely.
      item.logit = item.logit > 0 ? item.logit / repeat_ : item.logit * repeat_;
      item.logit -= float(it->second) * frequency_ + presence_;
    }
    c.sorted = false;
  }

 private:
  float repeat_, frequency_, presence_;
  int32_t last_n_;
  std::unordered_map<int32_t, int32_t> counts_;
};

class Dry final : public SamplerStage {
 public:
  Dry(float multiplier, float base, int32_t allowed_length, int32_t last_n, std::vector<std::string> breakers)
      : multiplier_(multiplier), base_(base), allowed_length_(allowed_length), last_n_(last_n),
        breakers_(std::move(breakers)) {}
  const char* Name() const override { return "dry"; }
  bool Inert() const override { return multiplier_ <= 0.0f || base_ < 1.0f; }

  void Apply(Candidates& c, SamplerContext& context) override {
    if (Inert() || context.history.size() < 2) return;
    constexpr size_t kMaxWindow = 4096;  // bounds the work per token
    const size_t limit = last_n_ < 0 ? kMaxWindow : std::min(kMaxWindow, size_t(last_n_));
    const size_t n = std::min(context.history.size(), limit);
    const int32_t* ctx = context.history.data() + context.history.size() - n;
    // The repeated sequence may not extend over a breaker: only the tail after the last breaker
    // can match.
    size_t tail = 0;
    while (tail < n && !IsBreaker(ctx[n - 1 - tail], context)) ++tail;
    if (tail == 0) return;
    // Z-array of the reversed context: z[k] = longest common suffix of ctx[0..n) and
    // ctx[0..n-k), i.e. how far the tail repeats the text ending at position n-1-k.
    reversed_.assign(std::make_reverse_iterator(ctx + n), std::make_reverse_iterator(ctx));
    ZArray(reversed_, &z_);
    best_.clear();
    for (size_t k = 1; k < n; ++k) {
      const size_t match = std::min({size_t(z_[k]), tail, n - k});
      if (match == 0) continue;
      const int32_t next = ctx[n - k];  // the token that followed the earlier occurrence
      if (IsBreaker(next, context)) continue;
      size_t& best = best_[next];
      best = std::max(best, match);
    }
    for (Candidate& item : c.items) {
      auto it = best_.find(item.id);
      if (it == best_.end() || it->second < size_t(allowed_length_)) continue;
      item.logit -= multiplier_ * std::pow(base_, float(it->second) - float(allowed_length_));
    }
    c.sorted = false;
  }

 private:
  static void ZArray(const std::vector<int32_t>& s, std::vector<int32_t>* z_out) {
    std::vector<int32_t>& z = *z_out;
    const size_t n = s.size();
    z.assign(n, 0);
    if (n) z[0] = int32_t(n);
    size_t left = 0, right = 0;
    for (size_t i = 1; i < n; ++i) {
      size_t length = i < right ? std::min(right - i, size_t(z[i - left])) : 0;
      while (i + length < n && s[length] == s[i + length]) ++length;
      z[i] = int32_t(length);
      if (i + length > right) {
        left = i;
        right = i + length;
      }
    }
  }

  bool IsBreaker(int32_t token, SamplerContext& context) {
    auto it = breaker_cache_.find(token);
    if (it != breaker_cache_.end()) return it->second;
    bool breaker = false;
    if (context.token_text) {
      const std::string_view text = context.token_text(token);
      for (const std::string& b : breakers_) breaker |= !b.empty() && text.find(b) != std::string_view::npos;
    }
    breaker_cache_[token] = breaker;
    return breaker;
  }

  float multiplier_, base_;
  int32_t allowed_length_, last_n_;
  std::vector<std::string> breakers_;
  std::unordered_map<int32_t, bool> breaker_cache_;
  std::unordered_map<int32_t, size_t> best_;
  std::vector<int32_t> reversed_, z_;
};

class MirostatV2 final : public SamplerStage {
 public:
  MirostatV2(float tau, float eta) : tau_(tau), eta_(eta), mu_(2.0f * tau) {}
  const char* Name() const override { return "mirostat_v2"; }
  void Apply(Candidates&, SamplerContext&) override {}
  int32_t Select(Candidates& c, SamplerContext& context) override {
    c.Softmax();
    // Drop tokens more surprising than mu (keep at least one), renormalise, draw.
    size_t keep = 0;
    while (keep < c.size() && -std::log2(c.items[keep].prob) <= mu_) ++keep;
    c.KeepFirst(std::max<size_t>(keep, 1));
    double total = 0.0;
    for (const Candidate& item : c.items) total += item.prob;
    const double u = context.Uniform() * total;
    double acc = 0.0;
    const Candidate* chosen = &c.items.back();
    for (const Candidate& item : c.items) {
      acc += item.prob;
      if (u < acc) {
        chosen = &item;
        break;
      }
    }
    const float surprise = -std::log2(float(chosen->prob / total));
    mu_ -= eta_ * (surprise - tau_);
    return chosen->id;
  }

 private:
  float tau_, eta_, mu_;
};

}  // namespace

std::unique_ptr<SamplerStage> MakePenalties(float repeat, float frequency, float presence, int32_t last_n) {
  return std::make_unique<Penalties>(repeat, frequency, presence, last_n);
}
std::unique_ptr<SamplerStage> MakeDry(float multiplier, float base, int32_t allowed_length, int32_t last_n,
                                      std::vector<std::string> breakers) {
  return std::make_unique<Dry>(multiplier, base, allowed_length, last_n, std::move(breakers));
}
std::unique_ptr<SamplerStage> MakeMirostatV2(float tau, float eta) { return std::make_unique<MirostatV2>(tau, eta); }

}  // namespace petrel
