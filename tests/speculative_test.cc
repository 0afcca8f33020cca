// Speculative decoding: greedy output identical token for token to plain decoding (n-gram
// lookup, draft models that are always right, sometimes right and always wrong, several draft
// lengths, small token limits and context shifts), the acceptance rule's distribution (a
// chi-square test over many seeds), the draft length chosen from measured costs, n-gram lookup and
// the vocabulary check.
#include "core/generation/speculative.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "core/generation/draft_length.h"
#include "core/generation/draft_model.h"
#include "core/generation/generate.h"
#include "core/generation/ngram_lookup.h"
#include "core/runtime/engine.h"
#include "core/tokenizer/tokenizer.h"
#include "util/test_data.h"
#include "util/tiny_model.h"

namespace petrel {
namespace {

using testing::SharedDir;

std::string Story(const char* type) {
  return SharedDir() + "/models/story-gguf/story-" + type + ".gguf";
}
std::string SynthTiny(const char* type) {
  return SharedDir() + "/models/synth-tiny/tiny-v2048-" + type + ".gguf";
}

std::unique_ptr<Engine> Load(const std::string& path, size_t context = 256) {
  EngineOptions options;
  options.n_threads = 2;
  options.context = context;
  auto engine = Engine::Load(path, options);
  EXPECT_TRUE(engine.ok()) << path << ": " << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

// A story opening, a repetitive prompt, and token ids that are no text at all.
std::vector<std::vector<int32_t>> Prompts(const Engine& engine) {
  std::vector<std::vector<int32_t>> prompts;
  if (const Tokenizer* tokenizer = engine.tokenizer()) {
    EncodeOptions encode;
    encode.add_special = true;
    prompts.push_back(
        tokenizer->Encode("Once upon a time, there was a little dog named Max.", encode));
    prompts.push_back(
        tokenizer->Encode("Tom had a ball. Tom had a ball. Tom had a ball. Tom had", encode));
  }
  std::vector<int32_t> ids = {1};
  for (int32_t i = 0; i < 20; ++i) ids.push_back(3 + (i * 37) % 500);
  prompts.push_back(ids);
  return prompts;
}

GenerateOptions Greedy(size_t max_new_tokens) {
  GenerateOptions options;
  options.max_new_tokens = max_new_tokens;
  options.ignore_eos = true;
  options.sampling.temperature = 0.0f;
  return options;
}

GenerateResult GenerateWith(Engine& engine, const std::vector<int32_t>& prompt,
                            const GenerateOptions& options, Speculator* speculator) {
  if (speculator) speculator->Reset();
  const SeqId seq = engine.NewSequence();
  auto result = Generate(engine, seq, prompt, options, nullptr, speculator);
  EXPECT_TRUE(result.ok()) << result.status().message();
  engine.FreeSequence(seq);
  return result.ok() ? std::move(result).value() : GenerateResult{};
}

// The draft options of a greedy run with ignore_eos: end tokens are never drafted.
DraftModelOptions NoEnd(const Engine& engine) {
  DraftModelOptions options;
  if (const Tokenizer* tokenizer = engine.tokenizer()) {
    for (size_t id = 0; id < tokenizer->n_vocab(); ++id) {
      if (tokenizer->IsEndOfGeneration(int32_t(id))) options.banned.push_back(int32_t(id));
    }
  }
  return options;
}

std::unique_ptr<Speculator> MakeSpeculator(std::unique_ptr<DraftSource> source, size_t max) {
  SpeculationOptions options;
  options.draft_min = std::min<size_t>(2, max);
  options.draft_max = max;
  auto speculator = Speculator::Create(std::move(source), options);
  EXPECT_TRUE(speculator.ok());
  return std::move(speculator).value();
}

// Proposes `length` copies of one token: with a token the model never picks, every draft is
// rejected at its first position.
class ConstantDraft final : public DraftSource {
 public:
  explicit ConstantDraft(int32_t token) : token_(token) {}
  Status Propose(std::span<const int32_t>, size_t max_tokens, Draft* draft) override {
    draft->Clear();
    draft->tokens.assign(max_tokens, token_);
    return Status::Ok();
  }

 private:
  int32_t token_;
};

// Checks `speculator` against plain greedy decoding over the prompts and draft lengths.
void ExpectSameAsPlain(Engine& engine, const std::function<std::unique_ptr<DraftSource>()>& source,
                       double min_acceptance, double max_acceptance, size_t n_new = 40) {
  for (const std::vector<int32_t>& prompt : Prompts(engine)) {
    const GenerateResult plain = GenerateWith(engine, prompt, Greedy(n_new), nullptr);
    ASSERT_EQ(plain.new_ids.size(), n_new);
    for (size_t max : {1, 3, 8}) {
      auto speculator = MakeSpeculator(source(), max);
      const GenerateResult spec = GenerateWith(engine, prompt, Greedy(n_new), speculator.get());
      EXPECT_EQ(spec.new_ids, plain.new_ids) << "draft length " << max;
      EXPECT_EQ(spec.text, plain.text);
      EXPECT_EQ(spec.stop_reason, plain.stop_reason);
      ASSERT_GT(spec.draft_tokens, 0u);
      const double rate = double(spec.draft_accepted) / double(spec.draft_tokens);
      EXPECT_GE(rate, min_acceptance) << "draft length " << max;
      EXPECT_LE(rate, max_acceptance) << "draft length " << max;
      EXPECT_LE(spec.target_passes, plain.target_passes);
      EXPECT_EQ(plain.target_passes, n_new);
    }
  }
}

TEST(SpeculativeGreedy, NgramLookupIsPlainDecoding) {
  auto engine = Load(Story("f32"));
  ASSERT_TRUE(engine);
  ExpectSameAsPlain(
      *engine, [] { return std::make_unique<NgramLookup>(3); }, 0.0, 1.0);
}

TEST(SpeculativeGreedy, AlwaysWrongDraftIsPlainDecoding) {
  auto engine = Load(Story("f32"));
  ASSERT_TRUE(engine);
  // Token 0 (<unk>) is never the story model's greedy choice.
  ExpectSameAsPlain(
      *engine, [] { return std::make_unique<ConstantDraft>(0); }, 0.0, 0.0);
}

TEST(SpeculativeGreedy, DraftModelThatIsTheModelIsAlwaysRight) {
  auto engine = Load(Story("f32"));
  ASSERT_TRUE(engine);
  ExpectSameAsPlain(
      *engine,
      [&] {
        auto draft = DraftModel::Create(*engine, Load(Story("f32")), NoEnd(*engine));
        EXPECT_TRUE(draft.ok()) << draft.status().message();
        return std::unique_ptr<DraftSource>(std::move(draft).value());
      },
      1.0, 1.0);
}

TEST(SpeculativeGreedy, QuantizedDraftModelIsPlainDecoding) {
  auto engine = Load(Story("f32"));
  ASSERT_TRUE(engine);
  ExpectSameAsPlain(
      *engine,
      [&] {
        auto draft = DraftModel::Create(*engine, Load(Story("q8_0")), DraftModelOptions{});
        EXPECT_TRUE(draft.ok()) << draft.status().message();
        return std::unique_ptr<DraftSource>(std::move(draft).value());
      },
      0.3, 1.0);
}

TEST(SpeculativeGreedy, SynthModelWithQuantizedDraftIsPlainDecoding) {
  auto engine = Load(SynthTiny("f32"));
  ASSERT_TRUE(engine);
  ExpectSameAsPlain(
      *engine,
      [&] {
        auto draft = DraftModel::Create(*engine, Load(SynthTiny("q4_0")), DraftModelOptions{});
        EXPECT_TRUE(draft.ok()) << draft.status().message();
        return std::unique_ptr<DraftSource>(std::move(draft).value());
      },
      0.0, 1.0);
  ExpectSameAsPlain(
      *engine, [] { return std::make_unique<NgramLookup>(2); }, 0.0, 1.0);
}

TEST(SpeculativeGreedy, TokenLimitsStopStringsAndContextShiftsAreKept) {
  auto engine = Load(Story("f32"), /*context=*/48);
  ASSERT_TRUE(engine);
  const std::vector<int32_t> prompt = Prompts(*engine)[1];
  auto speculator = MakeSpeculator(
      [&] {
        auto draft = DraftModel::Create(*engine, Load(Story("f32"), 48), NoEnd(*engine));
        EXPECT_TRUE(draft.ok());
        return std::unique_ptr<DraftSource>(std::move(draft).value());
      }(),
      8);
  for (size_t n : {1, 2, 5}) {
    const GenerateResult plain = GenerateWith(*engine, prompt, Greedy(n), nullptr);
    const GenerateResult spec = GenerateWith(*engine, prompt, Greedy(n), speculator.get());
    EXPECT_EQ(spec.new_ids, plain.new_ids) << n;
  }
  // Past the context of 48: shifts recompute, the output stays the same.
  GenerateOptions shifting = Greedy(80);
  shifting.context_shift = true;
  shifting.keep = 1;
  const GenerateResult plain = GenerateWith(*engine, prompt, shifting, nullptr);
  const GenerateResult spec = GenerateWith(*engine, prompt, shifting, speculator.get());
  EXPECT_GT(plain.context_shifts, 0u);
  EXPECT_EQ(spec.new_ids, plain.new_ids);
  EXPECT_EQ(spec.context_shifts, plain.context_shifts);
  // Without shifting, both stop at the context.
  const GenerateResult plain_stop = GenerateWith(*engine, prompt, Greedy(80), nullptr);
  const GenerateResult spec_stop = GenerateWith(*engine, prompt, Greedy(80), speculator.get());
  EXPECT_EQ(plain_stop.stop_reason, "context");
  EXPECT_EQ(spec_stop.stop_reason, "context");
  EXPECT_EQ(spec_stop.new_ids, plain_stop.new_ids);
  // A stop string ends both at the same text.
  GenerateOptions stop = Greedy(40);
  stop.ignore_eos = false;
  stop.stop = {"ball"};
  const GenerateResult plain_text = GenerateWith(*engine, Prompts(*engine)[0], stop, nullptr);
  const GenerateResult spec_text =
      GenerateWith(*engine, Prompts(*engine)[0], stop, speculator.get());
  EXPECT_EQ(spec_text.text, plain_text.text);
  EXPECT_EQ(spec_text.stop_reason, plain_text.stop_reason);
  // The draft's blocks all come back: the rolled-back positions hold no KV.
  EXPECT_EQ(engine->kv_free_blocks(), engine->kv_total_blocks());
}

// A seeded sampled run consumes its generator differently for drafted and plain tokens, so it
// reproduces when the draft lengths do: with a fixed length (--draft-min = --draft-max), or
// with the lengths chosen from the same timings (here a fake clock).
TEST(SpeculativeSampling, RunsWithBothSourcesAndIsReproducible) {
  auto engine = Load(Story("f32"));
  ASSERT_TRUE(engine);
  GenerateOptions options = Greedy(48);
  options.sampling.temperature = 0.8f;
  options.sampling.seed = 7;
  const std::vector<int32_t> prompt = Prompts(*engine)[0];
  DraftModelOptions draft_options;
  draft_options.temperature = 0.8f;
  draft_options.seed = 11;
  double now = 0.0;
  for (const bool fixed : {true, false}) {
    auto draft = DraftModel::Create(*engine, Load(Story("q8_0")), draft_options);
    ASSERT_TRUE(draft.ok());
    SpeculationOptions speculation;
    speculation.draft_min = fixed ? 4 : 0;
    speculation.draft_max = fixed ? 4 : 6;
    // Passes and draft tokens all "take" one unit; a plain step too.
    if (!fixed) speculation.clock = [&now] { return now += 1.0; };
    auto speculator = Speculator::Create(std::move(draft).value(), speculation);
    ASSERT_TRUE(speculator.ok());
    const GenerateResult first = GenerateWith(*engine, prompt, options, speculator->get());
    const GenerateResult again = GenerateWith(*engine, prompt, options, speculator->get());
    EXPECT_EQ(first.new_ids, again.new_ids) << (fixed ? "fixed" : "fake clock");
    EXPECT_EQ(first.new_ids.size(), 48u);
    EXPECT_GT(first.draft_tokens, 0u);
    if (fixed) {
      EXPECT_GT(first.draft_accepted, 0u);
    }
  }
  auto lookup = MakeSpeculator(std::make_unique<NgramLookup>(2), 4);
  EXPECT_EQ(GenerateWith(*engine, Prompts(*engine)[1], options, lookup.get()).new_ids.size(), 48u);
}

// Pearson's chi-square statistic of `counts` against probabilities `p` (cells with p = 0 must
// be empty).
double ChiSquare(const std::vector<size_t>& counts, const std::vector<double>& p, size_t n) {
  double chi = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) {
      EXPECT_EQ(counts[i], 0u) << "token " << i << " has probability 0";
      continue;
    }
    const double expected = p[i] * double(n);
    chi += (double(counts[i]) - expected) * (double(counts[i]) - expected) / expected;
  }
  return chi;
}

std::vector<double> Softmax(const std::vector<float>& logits, float temperature, size_t top_k) {
  std::vector<size_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  std::vector<double> p(logits.size(), 0.0);
  double sum = 0.0;
  const size_t kept = top_k == 0 ? order.size() : std::min(top_k, order.size());
  for (size_t r = 0; r < kept; ++r) {
    p[order[r]] = std::exp(double(logits[order[r]]) / temperature);
    sum += p[order[r]];
  }
  for (double& v : p) v /= sum;
  return p;
}

// Each draw: a fresh chain seeded from the master generator, a draft token drawn from q, the
// acceptance rule. The accepted-or-resampled tokens must follow the chain's p.
void ExpectTargetDistribution(const std::vector<float>& logits, const std::vector<float>& q,
                              float temperature, size_t top_k) {
  constexpr size_t kDraws = 40000;
  SamplingParams params;
  params.temperature = temperature;
  params.top_k = int32_t(top_k);
  params.top_p = 1.0f;
  params.min_p = 0.0f;
  std::mt19937_64 master(20261202);
  std::vector<size_t> counts(logits.size(), 0);
  size_t accepted_count = 0;
  for (size_t draw = 0; draw < kDraws; ++draw) {
    params.seed = master();
    auto chain = SamplerChain::Create(params);
    ASSERT_TRUE(chain.ok());
    int32_t draft = 0;
    if (q.empty()) {
      draft = 1;  // a point mass
    } else {
      const double u = double(master() >> 11) * (1.0 / 9007199254740992.0);
      double acc = 0.0;
      draft = int32_t(q.size() - 1);
      for (size_t i = 0; i < q.size(); ++i) {
        acc += q[i];
        if (u < acc) {
          draft = int32_t(i);
          break;
        }
      }
    }
    bool accepted = false;
    const SampleResult result =
        (*chain)->SampleDraft(logits.data(), logits.size(), draft, q, &accepted);
    ASSERT_GE(result.id, 0);
    // A rejection happens only where q(draft) > p(draft), where the residual is 0.
    EXPECT_EQ(accepted, result.id == draft);
    ++counts[size_t(result.id)];
    accepted_count += accepted;
  }
  const std::vector<double> p = Softmax(logits, temperature, top_k);
  size_t cells = 0;
  for (double v : p) cells += v > 0.0;
  // The 0.999 quantiles of chi-square with 3..7 degrees of freedom.
  const double limits[] = {0, 0, 0, 16.27, 18.47, 20.52, 22.46, 24.32};
  const double chi = ChiSquare(counts, p, kDraws);
  EXPECT_LT(chi, limits[cells - 1]) << "cells " << cells;
  // Sanity of the acceptance rate: sum over x of min(p, q).
  double expected_rate = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double qi = q.empty() ? (i == 1 ? 1.0 : 0.0) : double(q[i]);
    expected_rate += std::min(p[i], qi);
  }
  EXPECT_NEAR(double(accepted_count) / kDraws, expected_rate, 0.02);
}

TEST(SpeculativeSampling, AcceptanceRuleKeepsTheModelDistribution) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, -0.5f, 0.8f};
  // A draft that puts its mass elsewhere, one close to the model, and a point mass.
  const std::vector<float> skewed = {0.02f, 0.05f, 0.40f, 0.30f, 0.03f, 0.10f, 0.05f, 0.05f};
  const std::vector<float> close = {0.14f, 0.30f, 0.09f, 0.02f, 0.20f, 0.07f, 0.04f, 0.14f};
  ExpectTargetDistribution(logits, skewed, 1.0f, 0);
  ExpectTargetDistribution(logits, close, 0.7f, 0);
  ExpectTargetDistribution(logits, {}, 1.0f, 0);
  // Truncation: p is zero outside the top 5, where the draft still puts mass.
  ExpectTargetDistribution(logits, skewed, 1.3f, 5);
}

TEST(SpeculativeSampling, GreedyAcceptsOnlyTheArgmax) {
  SamplingParams params;
  params.temperature = 0.0f;
  auto chain = SamplerChain::Create(params);
  ASSERT_TRUE(chain.ok());
  const std::vector<float> logits = {0.1f, 3.0f, 2.0f};
  bool accepted = false;
  EXPECT_EQ((*chain)->SampleDraft(logits.data(), 3, 2, {}, &accepted).id, 1);
  EXPECT_FALSE(accepted);
  EXPECT_EQ((*chain)->SampleDraft(logits.data(), 3, 1, {}, &accepted).id, 1);
  EXPECT_TRUE(accepted);
}

// Synthetic costs: a pass of n tokens takes base + slope * (n - 1); a draft source's step
// `draft`, and its catch-up on p tokens a step plus `catch_up` per further token.
struct Costs {
  double base = 1.0, slope = 0.0, draft = 0.0, catch_up = 0.0;
  double Pass(size_t tokens) const { return base + slope * double(tokens - 1); }
  double CatchUp(size_t tokens) const { return draft + catch_up * double(tokens - 1); }
  // What a draft of k tokens costs, its verification included.
  double Drafting(size_t pending, size_t k) const {
    return CatchUp(pending) + draft * double(k - 1) + Pass(k + 1);
  }
};

// Drives `chooser` for `passes` passes as RunSpeculative would, with `accepts(pass, k)` the
// number of a k-token draft's tokens that stand; returns the chosen lengths and marks probes.
std::vector<size_t> Drive(DraftLengthChooser& chooser, const Costs& costs, size_t passes,
                          const std::function<size_t(size_t, size_t)>& accepts,
                          std::vector<bool>* probes = nullptr, size_t limit = 8) {
  std::vector<size_t> chosen;
  for (size_t pass = 0; pass < passes; ++pass) {
    const size_t k = chooser.Choose(limit);
    chosen.push_back(k);
    if (probes) probes->push_back(chooser.probing());
    if (k == 0) {
      chooser.RecordPass(1, costs.Pass(1));
      continue;
    }
    chooser.RecordCatchUp(chooser.pending(), costs.CatchUp(chooser.pending()));
    if (k > 1) chooser.RecordDraft(costs.draft);
    chooser.RecordPass(k + 1, costs.Pass(k + 1));
    chooser.RecordVerification(k, accepts(pass, k));
  }
  return chosen;
}

size_t Never(size_t, size_t) { return 0; }
size_t Always(size_t, size_t k) { return k; }

TEST(DraftLengthChooser, AlwaysWrongDraftSettlesAtZeroWithFewProbes) {
  // A draft model whose tokens cost 0.3 of a plain step, and a lookup whose drafts are free and
  // whose verification costs barely more than a plain step: neither is ever accepted.
  for (const Costs& costs : {Costs{1.0, 0.2, 0.3}, Costs{1.0, 0.01, 0.0}}) {
    DraftLengthChooser chooser(0, 8);
    std::vector<bool> probes;
    const std::vector<size_t> chosen = Drive(chooser, costs, 1000, Never, &probes);
    size_t drafted = 0;
    for (size_t pass = 10; pass < chosen.size(); ++pass) {
      if (chosen[pass] == 0) continue;
      ++drafted;
      EXPECT_EQ(chosen[pass], 1u) << "pass " << pass;  // only one-token probes
      EXPECT_TRUE(probes[pass]) << "pass " << pass;
    }
    EXPECT_GT(drafted, 0u);  // it keeps probing
    EXPECT_LE(double(drafted), 0.05 * double(chosen.size() - 10));
    EXPECT_EQ(chooser.Acceptance(0), 0.0);
  }
}

TEST(DraftLengthChooser, AlwaysRightCheapDraftDraftsTheLongest) {
  DraftLengthChooser chooser(0, 8);
  const std::vector<size_t> chosen = Drive(chooser, Costs{1.0, 0.05, 0.05}, 200, Always);
  // From the warm-up on, every pass drafts 8 but for a plain step every kRefreshInterval + 1
  // passes that re-measures the plain step's time.
  size_t plain = 0;
  for (size_t pass = 10; pass < chosen.size(); ++pass) {
    if (chosen[pass] == 0) {
      ++plain;
      continue;
    }
    EXPECT_EQ(chosen[pass], 8u) << pass;
  }
  EXPECT_LE(plain, 190 / DraftLengthChooser::kRefreshInterval);
  EXPECT_GT(chooser.ExpectedTokens(8), 8.5);
  // Less room than draft_max: all of it.
  EXPECT_EQ(chooser.Choose(5), 5u);
  EXPECT_EQ(chooser.Choose(0), 0u);
}

TEST(DraftLengthChooser, CostlyPassesKeepTheDraftShortOrOff) {
  // Every drafted token stands, but a pass costs a plain step per token and drafting is not
  // free: drafting cannot win.
  DraftLengthChooser chooser(0, 8);
  const std::vector<size_t> chosen = Drive(chooser, Costs{1.0, 1.0, 0.2}, 300, Always);
  size_t drafted = 0;
  for (size_t pass = 10; pass < chosen.size(); ++pass) drafted += chosen[pass] > 0;
  EXPECT_LE(double(drafted), 0.05 * double(chosen.size() - 10));
  // Half of the tokens stand at each position, passes nearly free: a short draft pays.
  DraftLengthChooser half(0, 8);
  const std::vector<size_t> some =
      Drive(half, Costs{1.0, 0.02, 0.02}, 200, [](size_t pass, size_t) {
        return pass % 2;  // alternately none and one
      });
  size_t plain = 0;
  for (size_t pass = 20; pass < some.size(); ++pass) {
    plain += some[pass] == 0;
    EXPECT_LE(some[pass], 3u) << pass;
  }
  EXPECT_LE(plain, 180 / DraftLengthChooser::kRefreshInterval);
}

TEST(DraftLengthChooser, ProbeScheduleIsDeterministic) {
  DraftLengthChooser first(0, 8), second(0, 8);
  std::vector<bool> probes;
  const Costs costs{2.0, 0.3, 0.5};
  const std::vector<size_t> a = Drive(first, costs, 400, Never, &probes);
  const std::vector<size_t> b = Drive(second, costs, 400, Never);
  EXPECT_EQ(a, b);
  // A plain step measures its time, then a probe; then 20, 40 and 80 plain steps between
  // probes, 80 from then on while probes are rejected.
  std::vector<size_t> at;
  for (size_t pass = 0; pass < probes.size(); ++pass) {
    if (probes[pass]) at.push_back(pass);
  }
  EXPECT_EQ(at, (std::vector<size_t>{1, 22, 63, 144, 225, 306, 387}));
  // Reset starts the same schedule again.
  first.Reset();
  EXPECT_EQ(Drive(first, costs, 400, Never), a);
}

TEST(DraftLengthChooser, DraftThatStartsAgreeingIsPickedUpAgain) {
  DraftLengthChooser chooser(0, 8);
  const std::vector<size_t> chosen =
      Drive(chooser, Costs{1.0, 0.05, 0.05}, 400,
            [](size_t pass, size_t k) { return pass < 200 ? 0 : k; });
  EXPECT_EQ(chosen[199], 0u);
  // The next probe comes within the longest interval and stands; the length then doubles.
  size_t plain = 0;
  for (size_t pass = 200 + DraftLengthChooser::kMaxProbeInterval + 5; pass < 400; ++pass) {
    if (chosen[pass] == 0) {
      ++plain;
      continue;
    }
    EXPECT_EQ(chosen[pass], 8u) << pass;
  }
  EXPECT_LE(plain, 2u);
}

TEST(DraftLengthChooser, ProbesOfADraftThatMustCatchUpStayWithinTheirShare) {
  // A draft model rejected every time, whose catch-up after plain steps costs `catch_up` of a
  // plain step per token: the probes' cost (catch-up, draft, the longer pass) stays within
  // kProbeShare of the total; a cheap catch-up is still probed on the schedule.
  for (const double catch_up : {0.0, 0.02, 0.2}) {
    const Costs costs{1.0, 0.1, 0.3};
    DraftLengthChooser chooser(0, 8);
    double total = 0.0, probing = 0.0;
    size_t probes = 0;
    for (size_t pass = 0; pass < 2000; ++pass) {
      const size_t k = chooser.Choose(8);
      const size_t pending = chooser.pending();
      if (k == 0) {
        chooser.RecordPass(1, costs.Pass(1));
        total += costs.Pass(1);
        continue;
      }
      ++probes;
      const double cost = double(pending) * catch_up + costs.draft + costs.Pass(k + 1);
      if (pass > 1) probing += cost - costs.Pass(1);  // the first one syncs the prompt
      total += cost;
      chooser.RecordCatchUp(pending, double(pending) * catch_up + costs.draft);
      chooser.RecordPass(k + 1, costs.Pass(k + 1));
      chooser.RecordVerification(k, 0);
    }
    EXPECT_LE(probing, DraftLengthChooser::kProbeShare * total) << catch_up;
    if (catch_up < 0.05) {
      EXPECT_GE(probes, 2000 / 81) << catch_up;
    }
  }
}

// Tokens per second of `passes` passes driven as RunSpeculative would, over a plain step's.
double SpeedupOverPlain(const Costs& costs, size_t passes,
                        const std::function<size_t(size_t, size_t)>& accepts) {
  DraftLengthChooser chooser(0, 8);
  double seconds = 0.0, tokens = 0.0;
  for (size_t pass = 0; pass < passes; ++pass) {
    const size_t pending = chooser.pending();
    const size_t k = chooser.Choose(8);
    if (k == 0) {
      chooser.RecordPass(1, costs.Pass(1));
      seconds += costs.Pass(1);
      tokens += 1.0;
      continue;
    }
    const size_t accepted = accepts(pass, k);
    seconds += costs.Drafting(pending, k);
    tokens += double(accepted + 1);
    chooser.RecordCatchUp(pending, costs.CatchUp(pending));
    if (k > 1) chooser.RecordDraft(costs.draft);
    chooser.RecordPass(k + 1, costs.Pass(k + 1));
    chooser.RecordVerification(k, accepted);
  }
  return tokens / seconds * costs.Pass(1);
}

// Costs of the kind measured for a tinyllama-shape F16 model with a Q6_K (~2/3 of its step) or
// Q4_0 (0.44) draft of the same weights: a pass of 2 tokens costs 1.11 steps, of 9 tokens 1.88,
// and a catch-up of two tokens a little more than a draft step. A draft that always stands pays
// only beyond one drafted token, so only if the first probe that stands starts drafting and the
// length grows; a draft that stands half the time never pays and must cost no more than its
// probes.
TEST(DraftLengthChooser, DraftModelAtTwoThirdsOfAStepPaysWhenItStands) {
  const Costs q6k{1.0, 0.11, 0.65, 0.1};
  EXPECT_GT(SpeedupOverPlain(q6k, 400, Always), 1.15);
  const Costs q4_0{1.0, 0.11, 0.44, 0.07};
  const double half = SpeedupOverPlain(q4_0, 400, [](size_t pass, size_t k) {
    // Each drafted token stands with probability 1/2, from a fixed pseudo-random sequence.
    uint64_t bits = (pass + 1) * 0x9E3779B97F4A7C15ull;
    bits ^= bits >> 29;
    size_t stood = 0;
    while (stood < k && ((bits >> stood) & 1)) ++stood;
    return stood;
  });
  EXPECT_GT(half, 0.95);
  EXPECT_LE(half, 1.0);
}

TEST(DraftLengthChooser, DraftMinIsAFloor) {
  DraftLengthChooser chooser(3, 8);
  const std::vector<size_t> chosen = Drive(chooser, Costs{1.0, 0.5, 0.5}, 100, Never);
  for (size_t k : chosen) EXPECT_EQ(k, 3u);
  EXPECT_EQ(chooser.Choose(2), 2u);  // the room is the limit
}

TEST(Speculator, OptionsAreChecked) {
  SpeculationOptions options;
  options.draft_min = 0;  // the length may be 0
  EXPECT_TRUE(Speculator::Create(std::make_unique<NgramLookup>(2), options).ok());
  options.draft_max = 0;
  EXPECT_FALSE(Speculator::Create(std::make_unique<NgramLookup>(2), options).ok());
  options.draft_max = 10;
  options.draft_min = 11;
  EXPECT_FALSE(Speculator::Create(std::make_unique<NgramLookup>(2), options).ok());
}

// A fake clock that advances one unit per reading: every pass and draft "takes" the same time,
// so drafting never pays. The choices and the output are the same in every run.
TEST(Speculator, FakeClockMakesTheChoicesReproducible) {
  auto engine = Load(Story("f32"));
  ASSERT_TRUE(engine);
  const std::vector<int32_t> prompt = Prompts(*engine)[0];
  const GenerateResult plain = GenerateWith(*engine, prompt, Greedy(80), nullptr);
  std::vector<std::vector<size_t>> histograms;
  for (int run = 0; run < 2; ++run) {
    double now = 0.0;
    SpeculationOptions options;
    options.draft_max = 6;
    options.clock = [&now] { return now += 1.0; };
    auto speculator = Speculator::Create(std::make_unique<ConstantDraft>(0), options);
    ASSERT_TRUE(speculator.ok());
    const GenerateResult spec = GenerateWith(*engine, prompt, Greedy(80), speculator->get());
    EXPECT_EQ(spec.new_ids, plain.new_ids);
    histograms.push_back((*speculator)->draft_lengths());
    // 79 passes after the prompt's: the first plain, then a probe, then probes 20 and 40 plain
    // steps apart.
    EXPECT_EQ(histograms.back()[1], 3u);
    EXPECT_EQ(spec.draft_tokens, 3u);
    EXPECT_EQ(spec.draft_accepted, 0u);
  }
  EXPECT_EQ(histograms[0], histograms[1]);
}

TEST(NgramLookup, ProposesWhatFollowedTheLatestMatch) {
  NgramLookup lookup(3);
  Draft draft;
  const std::vector<int32_t> context = {5, 1, 2, 3, 9, 8, 1, 2, 3, 4, 6, 7, 1, 2, 3};
  ASSERT_TRUE(lookup.Propose(context, 3, &draft).ok());
  EXPECT_EQ(draft.tokens, (std::vector<int32_t>{4, 6, 7}));  // the latest of two matches
  EXPECT_TRUE(draft.probs.empty());
  // Only the last token matches: a 1-gram.
  ASSERT_TRUE(lookup.Propose(std::vector<int32_t>{7, 8, 9, 1, 2, 7}, 8, &draft).ok());
  EXPECT_EQ(draft.tokens, (std::vector<int32_t>{8, 9, 1, 2, 7}));
  ASSERT_TRUE(lookup.Propose(std::vector<int32_t>{1, 2, 3, 4}, 8, &draft).ok());
  EXPECT_TRUE(draft.tokens.empty());
  // Unknown tokens (-1) are never matched or proposed.
  ASSERT_TRUE(lookup.Propose(std::vector<int32_t>{-1, -1, 4, -1, -1}, 8, &draft).ok());
  EXPECT_TRUE(draft.tokens.empty());
  ASSERT_TRUE(lookup.Propose(std::vector<int32_t>{4, 5, -1, 4}, 8, &draft).ok());
  EXPECT_EQ(draft.tokens, (std::vector<int32_t>{5}));
}

TEST(DraftModel, VocabularyMustMatch) {
  auto story = Load(Story("f32"));
  ASSERT_TRUE(story);
  // A model of 300 tokens against the story model's 2048.
  testing::TinyModelSpec spec;
  const std::string gguf = testing::ScratchDir() + "/speculative_vocab300.gguf";
  ASSERT_EQ(testing::WriteTinyModel(spec, testing::ScratchDir() + "/speculative_vocab300", gguf),
            "");
  auto other = Load(gguf);
  ASSERT_TRUE(other);
  const Status status = CheckSameVocabulary(*story, *other);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("vocabulary has 300 tokens, the model's 2048"), std::string::npos)
      << status.message();
  EXPECT_FALSE(DraftModel::Create(*story, std::move(other), DraftModelOptions{}).ok());
  EXPECT_TRUE(CheckSameVocabulary(*story, *Load(Story("q8_0"))).ok());
}

// A primed draft model holds the prompt: its first draft after the prompt feeds only the
// token sampled since, and drafts what an unprimed one drafts.
TEST(DraftModel, PrimedWithThePromptCatchesUpOnlyTheNewTokens) {
  auto engine = Load(Story("f32"));
  ASSERT_TRUE(engine);
  auto primed = DraftModel::Create(*engine, Load(Story("q8_0")), DraftModelOptions{});
  auto fresh = DraftModel::Create(*engine, Load(Story("q8_0")), DraftModelOptions{});
  ASSERT_TRUE(primed.ok() && fresh.ok());
  const std::vector<int32_t> prompt = Prompts(*engine).front();
  ASSERT_TRUE((*primed)->CatchUp(prompt).ok());
  std::vector<int32_t> context = prompt;
  context.push_back(prompt.back());  // a token sampled after the prompt
  Draft from_primed, from_fresh;
  ASSERT_TRUE((*primed)->Propose(context, 4, &from_primed).ok());
  ASSERT_TRUE((*fresh)->Propose(context, 4, &from_fresh).ok());
  EXPECT_EQ(from_primed.synced, 1u);
  EXPECT_EQ(from_fresh.synced, context.size());
  EXPECT_EQ(from_primed.tokens, from_fresh.tokens);
  EXPECT_EQ(from_primed.tokens.size(), 4u);
}

}  // namespace
}  // namespace petrel
