// Sampler stages on hand-made distributions with hand-computed results, the factory, the draw's
// statistics (chi-squared), and stop-string matching across token boundaries.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>
#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/generation/sampling/log_sum_exp.h"
#include "core/generation/sampling/sampler.h"
#include "core/generation/sampling/sampling_fields.h"
#include "core/generation/stop_matcher.h"

namespace petrel {
namespace {

// Logits of a distribution with probabilities proportional to `weights`.
std::vector<float> LogitsOf(const std::vector<double>& weights) {
  std::vector<float> logits;
  for (double w : weights) logits.push_back(w > 0 ? float(std::log(w)) : -INFINITY);
  return logits;
}

std::vector<int32_t> Ids(const Candidates& c) {
  std::vector<int32_t> ids;
  for (const Candidate& item : c.items) ids.push_back(item.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

Candidates Apply(SamplerStage& stage, const std::vector<float>& logits, SamplerContext* context = nullptr) {
  SamplerContext local;
  Candidates c;
  c.Reset(logits.data(), logits.size());
  stage.Apply(c, context ? *context : local);
  return c;
}

// p = 0.4, 0.3, 0.2, 0.1 for ids 0..3
const std::vector<float> kFour = LogitsOf({4, 3, 2, 1});

// Every way of ordering candidates (radix sort of a fresh vocabulary, comparison sort, top-k's
// partial sort, the unsorted best) agrees with one comparison sort, on a large random vocabulary
// with many tied logits, both signed zeros, infinities and shuffled ids.
TEST(CandidatesTest, EveryOrderingAgreesWithAComparisonSort) {
  std::mt19937 rng(20261202);
  for (int trial = 0; trial < 20; ++trial) {
    const size_t n = 1000 + rng() % 40000;
    std::vector<float> logits(n);
    std::uniform_real_distribution<float> wide(-30.0f, 30.0f);
    for (float& v : logits) {
      const uint32_t kind = rng() % 16;
      v = kind == 0 ? 0.0f : kind == 1 ? -0.0f : kind == 2 ? float(int(rng() % 5)) - 2.0f
          : kind == 3 ? -INFINITY : wide(rng);
    }
    if (trial % 4 == 0) logits[rng() % n] = INFINITY;
    Candidates fresh;
    fresh.Reset(logits.data(), n);
    std::vector<Candidate> expected = fresh.items;
    std::sort(expected.begin(), expected.end(), Ahead);
    auto ids = [](const std::vector<Candidate>& items, size_t count) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < count && i < items.size(); ++i) out.push_back(items[i].id);
      return out;
    };
    EXPECT_EQ(fresh.items[fresh.Best()].id, expected[0].id);
    Candidates radix = fresh;
    radix.Sort();
    EXPECT_EQ(ids(radix.items, n), ids(expected, n)) << "trial " << trial;
    const size_t k = 1 + rng() % 100;
    Candidates partial = fresh;
    partial.SortFirst(k);
    EXPECT_EQ(ids(partial.items, n), ids(expected, k));
    Candidates shuffled = fresh;
    std::shuffle(shuffled.items.begin(), shuffled.items.end(), rng);
    EXPECT_EQ(shuffled.items[shuffled.Best()].id, expected[0].id);
    shuffled.Sort();
    EXPECT_EQ(ids(shuffled.items, n), ids(expected, n));
  }
}

// The vectorized normalizer of `logprobs` against a double-precision sum of libm's exp, over
// fresh random vocabularies of several sizes and spreads, with masked (-inf) entries; NaN and
// all-masked rows keep their meaning.
TEST(LogSumExpTest, MatchesDoublePrecisionOnRandomLogits) {
  std::mt19937 rng(20261207);
  for (const size_t n : {1u, 7u, 255u, 256u, 1000u, 32000u, 151936u}) {
    for (const float spread : {0.5f, 8.0f, 60.0f, 400.0f}) {
      std::normal_distribution<float> logit(-3.0f, spread);
      std::vector<float> logits(n);
      for (float& l : logits) l = logit(rng);
      for (size_t i = 0; i < n; i += 5) logits[i] = -INFINITY;  // a grammar's mask
      if (n > 1) logits[n - 1] = logit(rng);
      double max = -INFINITY;
      for (float l : logits) max = std::max(max, double(l));
      double sum = 0.0;
      for (float l : logits) sum += std::exp(double(l) - max);
      const double expected = max + std::log(sum);
      if (!std::isfinite(expected)) continue;
      EXPECT_NEAR(LogSumExp(logits.data(), n), expected, 1e-6 * std::max(1.0, std::abs(expected)))
          << n << " logits, spread " << spread;
    }
  }
  const float masked[3] = {-INFINITY, -INFINITY, -INFINITY};
  EXPECT_EQ(LogSumExp(masked, 3), -INFINITY);
  const float with_nan[3] = {0.0f, NAN, 1.0f};
  EXPECT_TRUE(std::isnan(LogSumExp(with_nan, 3)));
}

TEST(SamplerStages, TopKKeepsTheKMostLikely) {
  EXPECT_EQ(Ids(Apply(*MakeTopK(2), kFour)), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(Ids(Apply(*MakeTopK(0), kFour)).size(), 4u);
  EXPECT_EQ(Ids(Apply(*MakeTopK(9), kFour)).size(), 4u);
}

TEST(SamplerStages, TopPKeepsTheSmallestSetReachingP) {
  // cumulative 0.4, 0.7, 0.9, 1.0
  EXPECT_EQ(Ids(Apply(*MakeTopP(0.65f), kFour)), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(Ids(Apply(*MakeTopP(0.75f), kFour)), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(Ids(Apply(*MakeTopP(0.1f), kFour)), (std::vector<int32_t>{0}));
}

TEST(SamplerStages, MinPKeepsTokensAboveAFractionOfTheBest) {
  // p >= 0.5 * 0.4 = 0.2 keeps ids 0, 1, 2.
  EXPECT_EQ(Ids(Apply(*MakeMinP(0.5f), kFour)), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(Ids(Apply(*MakeMinP(0.8f), kFour)), (std::vector<int32_t>{0}));  // 0.3 < 0.8 * 0.4
}

TEST(SamplerStages, TypicalPKeepsTokensNearTheEntropy) {
  // H = -Σ p ln p = 1.2799; surprises: 0.916, 1.204, 1.609, 2.303 -> distances 0.364, 0.076,
  // 0.330, 1.023: order 1, 2, 0, 3; mass 0.3, 0.5, 0.9.
  EXPECT_EQ(Ids(Apply(*MakeTypicalP(0.45f), kFour)), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(Ids(Apply(*MakeTypicalP(0.85f), kFour)), (std::vector<int32_t>{0, 1, 2}));
}

TEST(SamplerStages, TemperatureScalesLogits) {
  auto c = Apply(*MakeTemperature(2.0f, 0.0f, 1.0f), kFour);
  for (const Candidate& item : c.items) EXPECT_FLOAT_EQ(item.logit, kFour[size_t(item.id)] / 2.0f);
  auto greedy = Apply(*MakeTemperature(0.0f, 0.0f, 1.0f), kFour);
  EXPECT_EQ(Ids(greedy), (std::vector<int32_t>{0}));
}

TEST(SamplerStages, DynamicTemperatureFollowsEntropy) {
  // Uniform over 4: normalised entropy 1 -> temperature = t + range = 1.5.
  const std::vector<float> flat(4, 0.5f);
  auto c = Apply(*MakeTemperature(1.0f, 0.5f, 1.0f), flat);
  for (const Candidate& item : c.items) EXPECT_NEAR(item.logit, 0.5f / 1.5f, 1e-6);
}

TEST(SamplerStages, LogitBiasAddsAndBans) {
  auto c = Apply(*MakeLogitBias({{0, -INFINITY}, {3, 2.0f}}), kFour);
  std::map<int32_t, float> by_id;
  for (const Candidate& item : c.items) by_id[item.id] = item.logit;
  EXPECT_TRUE(std::isinf(by_id[0]) && by_id[0] < 0);
  EXPECT_FLOAT_EQ(by_id[3], kFour[3] + 2.0f);
}

TEST(SamplerStages, PenaltiesFollowLlamaCppRules) {
  SamplerContext context;
  context.history = {1, 1, 2, 9};
  const std::vector<float> logits = {1.0f, 2.0f, -1.0f, 0.5f};
  auto c = Apply(*MakePenalties(2.0f, 0.5f, 0.25f, 64), logits, &context);
  std::map<int32_t, float> by_id;
  for (const Candidate& item : c.items) by_id[item.id] = item.logit;
  EXPECT_FLOAT_EQ(by_id[0], 1.0f);                       // not in history
  EXPECT_FLOAT_EQ(by_id[1], 2.0f / 2.0f - 2 * 0.5f - 0.25f);  // positive: divided
  EXPECT_FLOAT_EQ(by_id[2], -1.0f * 2.0f - 0.5f - 0.25f);     // negative: multiplied
  // A window of 1 sees only the last token (9).
  auto windowed = Apply(*MakePenalties(2.0f, 0.0f, 0.0f, 1), logits, &context);
  for (const Candidate& item : windowed.items) EXPECT_FLOAT_EQ(item.logit, logits[size_t(item.id)]);
}

TEST(SamplerStages, DryPenalisesTheTokenThatExtendsARepeat) {
  SamplerContext context;
  // "5 6 7 8 ... 5 6 7": the next token 8 would extend a repeat of length 3.
  context.history = {5, 6, 7, 8, 1, 2, 5, 6, 7};
  std::vector<float> logits(10, 0.0f);
  auto c = Apply(*MakeDry(1.0f, 2.0f, 2, -1, {}), logits, &context);
  for (const Candidate& item : c.items) {
    // length 3, allowed 2: penalty 1 * 2^(3-2) = 2.
    EXPECT_FLOAT_EQ(item.logit, item.id == 8 ? -2.0f : 0.0f) << item.id;
  }
  // A sequence breaker in the tail stops the match.
  context.token_text = [](int32_t id) -> std::string_view { return id == 6 ? "\n" : "x"; };
  auto broken = Apply(*MakeDry(1.0f, 2.0f, 2, -1, {"\n"}), logits, &context);
  for (const Candidate& item : broken.items) EXPECT_FLOAT_EQ(item.logit, 0.0f) << item.id;
}

TEST(SamplerStages, XtcRemovesTopChoicesButTheLeastLikelyOfThem) {
  SamplerContext context;
  auto c = Apply(*MakeXtc(1.0f, 0.25f), kFour, &context);  // above 0.25: ids 0 (0.4), 1 (0.3)
  EXPECT_EQ(Ids(c), (std::vector<int32_t>{1, 2, 3}));
}

TEST(SamplerChainTest, GreedyAppliesBiasAndPenaltiesThenArgmax) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.logit_bias = {{0, -10.0f}};
  auto chain = SamplerChain::Create(params);
  ASSERT_TRUE(chain.ok());
  EXPECT_EQ((*chain)->Sample(kFour.data(), 4).id, 1);
}

// A greedy chain whose other stages change nothing takes the raw argmax without building the
// candidates; it must pick what the full chain picks (a zero bias on one token keeps the full
// path): the first of tied maxima, -0 tied with +0, -inf and NaN never ahead, with the same
// log-probability.
TEST(SamplerChainTest, GreedyShortcutPicksWhatTheFullChainPicks) {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> level(-3, 3);
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE(trial);
    const size_t n = 1 + size_t(rng() % 700);
    std::vector<float> logits(n);
    for (float& logit : logits) logit = float(level(rng)) * 0.5f;  // many ties
    for (int i = 0; i < 3; ++i) logits[rng() % n] = -INFINITY;
    if (trial % 3 == 0) logits[rng() % n] = std::nanf("");
    if (trial % 5 == 0) logits[rng() % n] = -0.0f;
    if (trial % 7 == 0) std::fill(logits.begin(), logits.end(), 0.0f);
    SamplingParams plain;
    plain.temperature = 0.0f;
    SamplingParams full = plain;
    full.logit_bias = {{int32_t(rng() % n), 0.0f}};
    auto fast_chain = SamplerChain::Create(plain);
    auto full_chain = SamplerChain::Create(full);
    ASSERT_TRUE(fast_chain.ok() && full_chain.ok());
    const SampleResult fast = (*fast_chain)->Sample(logits.data(), n);
    const SampleResult slow = (*full_chain)->Sample(logits.data(), n);
    EXPECT_EQ(fast.id, slow.id);
    EXPECT_TRUE(fast.logprob == slow.logprob ||
                (std::isnan(fast.logprob) && std::isnan(slow.logprob)))
        << fast.logprob << " " << slow.logprob;
  }
}

TEST(SamplerChainTest, RejectsWhatItDoesNotSupport) {
  SamplingParams params;
  params.mirostat = 1;
  EXPECT_FALSE(SamplerChain::Create(params).ok());
  params = {};
  params.top_p = 0.0f;
  EXPECT_FALSE(SamplerChain::Create(params).ok());
  params = {};
  params.order = {"top_k", "wibble"};
  EXPECT_FALSE(SamplerChain::Create(params).ok());
  EXPECT_FALSE(ParseSamplerOrder("top_k;nonsense").ok());
  EXPECT_TRUE(ParseSamplerOrder("penalties;dry;top_k;typ_p;top_p;min_p;xtc;temperature").ok());
  SamplingParams from_json;
  EXPECT_FALSE(SamplingParamsFromJson(nlohmann::json{{"temperature", "hot"}}, &from_json).ok());
  EXPECT_FALSE(SamplingParamsFromJson(nlohmann::json{{"logit_bias", {{"x", 1}}}}, &from_json).ok());
  ASSERT_TRUE(SamplingParamsFromJson(nlohmann::json{{"logit_bias", {{"3", -100}}}, {"seed", 9}, {"top_logprobs", 2}}, &from_json).ok());
  EXPECT_FLOAT_EQ(from_json.logit_bias[3], -100.0f);
  EXPECT_EQ(from_json.seed, 9u);
  EXPECT_EQ(from_json.n_probs, 2);
}

// Logits 0, 1, 2, 10 (and a banned one): mean 3.25, standard deviation sqrt(15.6875) = 3.96
// over the finite ones. n = 1 keeps logits above 6.04 (the 10 only); n = 3 above -1.88 (all
// four); n <= 0 is off.
TEST(SamplerStageTest, TopNSigmaKeepsLogitsWithinNDeviations) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 10.0f, -INFINITY};
  auto one = MakeTopNSigma(1.0f);
  EXPECT_EQ(Ids(Apply(*one, logits)), (std::vector<int32_t>{3}));
  auto three = MakeTopNSigma(3.0f);
  EXPECT_EQ(Ids(Apply(*three, logits)), (std::vector<int32_t>{0, 1, 2, 3}));
  auto two = MakeTopNSigma(2.0f);  // above 2.08: the 10 only, as 2 is just below
  EXPECT_EQ(Ids(Apply(*two, logits)), (std::vector<int32_t>{3}));
  auto off = MakeTopNSigma(-1.0f);
  EXPECT_EQ(Apply(*off, logits).size(), logits.size());
}

// The ranges every reader shares (sampling_fields.h) are what the factory enforces.
TEST(SamplerChainTest, FactoryChecksTheSharedRanges) {
  for (const SamplingField& field : SamplingFields()) {
    SCOPED_TRACE(field.name);
    SamplingParams params;
    SetSamplingValue(field, field.hi, &params);
    EXPECT_TRUE(SamplerChain::Create(params).ok());
    SetSamplingValue(field, field.hi + 1, &params);
    EXPECT_FALSE(SamplerChain::Create(params).ok());
    EXPECT_FALSE(CheckSamplingValue(field, field.lo_open ? field.lo : field.lo - 1).ok());
  }
  SamplingParams params;
  params.dry_sequence_breakers = {""};
  EXPECT_FALSE(SamplerChain::Create(params).ok());
}

TEST(SamplerChainTest, EveryKnownStageIsBuilt) {
  SamplingParams params;
  params.temperature = 0.7f;
  params.order = DefaultSamplerOrder();
  auto chain = SamplerChain::Create(params);
  ASSERT_TRUE(chain.ok());
  const auto names = (*chain)->StageNames();
  for (const std::string& stage : DefaultSamplerOrder()) {
    EXPECT_NE(std::find(names.begin(), names.end(), stage), names.end()) << stage;
  }
  EXPECT_EQ(names.back(), "dist");
  params.mirostat = 2;
  EXPECT_EQ((*SamplerChain::Create(params))->StageNames().back(), "mirostat_v2");
}

TEST(SamplerChainTest, LogprobsAreOfTheRawDistribution) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.n_probs = 2;
  auto chain = SamplerChain::Create(params);
  const SampleResult r = (*chain)->Sample(kFour.data(), 4);
  EXPECT_NEAR(r.logprob, std::log(0.4), 1e-6);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[1].id, 1);
  EXPECT_NEAR(r.top[1].logprob, std::log(0.3), 1e-6);
}

// Draws at temperature T from p must follow softmax(log p / T): chi-squared over many draws.
TEST(SamplerChainTest, DrawsMatchTheTemperedDistribution) {
  const std::vector<double> p = {0.5, 0.25, 0.15, 0.07, 0.03};
  const std::vector<float> logits = LogitsOf(p);
  for (float temperature : {1.0f, 0.7f, 1.5f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.top_k = 0;
    params.top_p = 1.0f;
    params.min_p = 0.0f;
    params.seed = 1234;
    auto chain = SamplerChain::Create(params);
    ASSERT_TRUE(chain.ok());
    const int draws = 40000;
    std::vector<int> counts(p.size());
    for (int i = 0; i < draws; ++i) ++counts[size_t((*chain)->Sample(logits.data(), logits.size()).id)];
    std::vector<double> expected(p.size());
    double z = 0.0;
    for (size_t i = 0; i < p.size(); ++i) z += expected[i] = std::pow(p[i], 1.0 / temperature);
    double chi2 = 0.0;
    for (size_t i = 0; i < p.size(); ++i) {
      const double e = expected[i] / z * draws;
      chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    EXPECT_LT(chi2, 18.47) << "temperature " << temperature;  // p = 0.001 at 4 degrees of freedom
  }
}

TEST(SamplerChainTest, SameSeedSameTokens) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 42;
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::sin(double(i)));
  auto a = SamplerChain::Create(params), b = SamplerChain::Create(params);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ((*a)->Sample(logits.data(), logits.size()).id, (*b)->Sample(logits.data(), logits.size()).id);
  }
}

TEST(StopMatcherTest, StopSpanningTokensIsNeverLeaked) {
  StopMatcher stops({"<end>", "STOP"});
  std::string emitted;
  for (const char* piece : {"Hello ", "wor", "ld <e", "n", "d> tail"}) emitted += stops.Push(piece);
  EXPECT_TRUE(stops.matched());
  EXPECT_EQ(stops.matched_stop(), "<end>");
  EXPECT_EQ(emitted, "Hello world ");
}

TEST(StopMatcherTest, PartialMatchesAreHeldBackThenReleased) {
  StopMatcher stops({"STOP"});
  EXPECT_EQ(stops.Push("ab ST"), "ab ");
  EXPECT_EQ(stops.Push("O"), "");
  EXPECT_EQ(stops.Push("P!"), "");  // STOP completed
  EXPECT_TRUE(stops.matched());
  StopMatcher again({"STOP"});
  EXPECT_EQ(again.Push("ST"), "");
  EXPECT_EQ(again.Push("ART"), "START");
  EXPECT_EQ(again.Push("x ST"), "x ");
  EXPECT_EQ(again.Flush(), "ST");
  EXPECT_FALSE(again.matched());
}

}  // namespace
}  // namespace petrel
