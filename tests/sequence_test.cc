// Sequences stepped together: Engine::Step's per-sequence admission and results, and
// RunSequences giving each sequence the tokens it gets alone, failures staying with their own.
#include "core/generation/sequence.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "core/generation/generate.h"
#include "core/runtime/engine.h"
#include "util/test_data.h"

namespace petrel {

// Heap allocations made by this thread (the backend's workers are not counted).
thread_local size_t g_allocations = 0;

}  // namespace petrel

// Not inlined, so that the compiler does not pair malloc and free across them.
__attribute__((noinline)) void* operator new(size_t bytes) {
  ++petrel::g_allocations;
  void* p = std::malloc(bytes ? bytes : 1);
  if (!p) std::abort();
  return p;
}
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace petrel {
namespace {

using testing::SharedDir;

constexpr size_t kVocab = 2048;

std::string StoryGguf() { return SharedDir() + "/models/story-gguf/story-f32.gguf"; }

std::unique_ptr<Engine> Load(EngineOptions options) {
  options.n_threads = 2;
  auto engine = Engine::Load(StoryGguf(), options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

std::vector<int32_t> Prompt(size_t length, int32_t salt) {
  std::vector<int32_t> ids = {1};
  for (size_t i = 1; i < length; ++i)
    ids.push_back(int32_t(3 + (i * 131 + size_t(salt) * 977) % 2000));
  return ids;
}

GenerateOptions Greedy(size_t max_new_tokens, bool ignore_eos) {
  GenerateOptions options;
  options.max_new_tokens = max_new_tokens;
  options.ignore_eos = ignore_eos;
  options.sampling.temperature = 0.0f;
  return options;
}

struct Request {
  std::vector<int32_t> prompt;
  GenerateOptions options;
};

// Each request on its own fresh sequence through Generate.
std::vector<GenerateResult> RunAlone(Engine& engine, const std::vector<Request>& requests) {
  std::vector<GenerateResult> results;
  for (const Request& request : requests) {
    const SeqId seq = engine.NewSequence();
    auto result = Generate(engine, seq, request.prompt, request.options, nullptr);
    EXPECT_TRUE(result.ok()) << result.status().message();
    results.push_back(result.ok() ? std::move(result).value() : GenerateResult{});
    engine.FreeSequence(seq);
  }
  return results;
}

// All requests together; returns the finished sequences (their engine sequences are freed).
std::vector<std::unique_ptr<Sequence>> RunTogether(Engine& engine,
                                                   const std::vector<Request>& requests) {
  std::vector<std::unique_ptr<Sequence>> owned;
  std::vector<Sequence*> sequences;
  for (const Request& request : requests) {
    auto sequence = Sequence::Create(engine, engine.NewSequence(), request.prompt, request.options);
    EXPECT_TRUE(sequence.ok()) << sequence.status().message();
    if (!sequence.ok()) return {};
    owned.push_back(std::move(sequence).value());
    sequences.push_back(owned.back().get());
  }
  RunSequences(engine, sequences);
  for (Sequence* sequence : sequences) {
    EXPECT_TRUE(sequence->finished());
    engine.FreeSequence(sequence->seq());
  }
  return owned;
}

TEST(Sequences, SteppedTogetherTheyGetTheTokensTheyGetAlone) {
  EngineOptions options;
  options.context = 256;
  options.max_sequences = 4;
  options.max_batch_tokens = 16;  // prompts arrive in chunks while other sequences sample
  auto engine = Load(options);
  ASSERT_TRUE(engine);
  const std::vector<Request> requests = {
      {Prompt(3, 0), Greedy(20, false)},
      {Prompt(40, 1), Greedy(12, false)},
      {Prompt(9, 2), Greedy(30, true)},
      {Prompt(21, 3), Greedy(1, false)},
  };
  const auto alone = RunAlone(*engine, requests);
  const auto together = RunTogether(*engine, requests);
  ASSERT_EQ(together.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(i);
    const GenerateResult& got = together[i]->result();
    EXPECT_TRUE(together[i]->status().ok()) << together[i]->status().message();
    EXPECT_EQ(got.new_ids, alone[i].new_ids);
    EXPECT_EQ(got.text, alone[i].text);
    EXPECT_EQ(got.stop_reason, alone[i].stop_reason);
    EXPECT_EQ(got.prompt_tokens, requests[i].prompt.size());
    ASSERT_EQ(got.tokens.size(), got.new_ids.size());
    for (size_t t = 0; t < got.tokens.size(); ++t) {
      EXPECT_NEAR(got.tokens[t].logprob, alone[i].tokens[t].logprob, 1e-4) << "token " << t;
    }
  }
  EXPECT_EQ(together[2]->result().new_ids.size(), 30u);
  EXPECT_EQ(together[3]->result().new_ids.size(), 1u);
}

// Preemption: the engine sequence is freed between steps, while the prompt is fed or while
// tokens are sampled; resumed over nothing or over the blocks the prefix cache kept, the sequence
// recomputes the rest and samples the tokens it samples undisturbed.
TEST(Sequences, APreemptedSequenceResumesWithTheSameTokens) {
  EngineOptions options;
  options.context = 256;
  options.max_batch_tokens = 16;
  auto engine = Load(options);
  ASSERT_TRUE(engine);
  const Request request{Prompt(40, 5), Greedy(24, true)};
  const auto alone = RunAlone(*engine, {request});
  std::vector<StepOutput> outputs;
  for (const bool from_cache : {false, true}) {
    for (const size_t preempt_at : {size_t(1), size_t(6)}) {  // prefilling, sampling
      SCOPED_TRACE(std::to_string(from_cache) + " " + std::to_string(preempt_at));
      auto created =
          Sequence::Create(*engine, engine->NewSequence(), request.prompt, request.options);
      ASSERT_TRUE(created.ok()) << created.status().message();
      Sequence& sequence = **created;
      for (size_t step = 0; !sequence.finished(); ++step) {
        if (step == preempt_at) {
          engine->CacheSequenceBlocks(sequence.seq(), sequence.held());
          engine->FreeSequence(sequence.seq());
          size_t reused = 0;
          const SeqId seq = from_cache ? engine->NewSequenceFromCache(sequence.held(), &reused)
                                       : engine->NewSequence();
          EXPECT_EQ(reused > 0, from_cache);
          const Status resumed = sequence.Resume(seq);
          ASSERT_TRUE(resumed.ok()) << resumed.message();
        }
        const StepInput input = sequence.NextInput(16);
        (void)engine->Step(std::span<const StepInput>(&input, 1), &outputs);
        sequence.Consume(outputs[0]);
      }
      EXPECT_TRUE(sequence.status().ok()) << sequence.status().message();
      EXPECT_EQ(sequence.result().new_ids, alone[0].new_ids);
      engine->FreeSequence(sequence.seq());
    }
  }
}

// 8 blocks of 32 tokens: two short sequences take 2 blocks each, the long one runs out of
// blocks at 128 tokens, while the others still need to grow.
TEST(Sequences, OneThatRunsOutOfKvBlocksFailsAlone) {
  EngineOptions options;
  options.context = 256;
  options.max_sequences = 1;
  options.kv_block_tokens = 32;
  auto engine = Load(options);
  ASSERT_TRUE(engine);
  const std::vector<Request> requests = {
      {Prompt(4, 4), Greedy(60, true)},
      {Prompt(100, 5), Greedy(100, true)},
      {Prompt(6, 6), Greedy(58, true)},
  };
  const auto alone = RunAlone(*engine, requests);
  EXPECT_EQ(alone[1].new_ids.size(), 100u);  // fits alone
  const auto together = RunTogether(*engine, requests);
  ASSERT_EQ(together.size(), requests.size());
  for (size_t i : {0, 2}) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(together[i]->status().ok()) << together[i]->status().message();
    EXPECT_EQ(together[i]->result().stop_reason, "length");
    EXPECT_EQ(together[i]->result().new_ids, alone[i].new_ids);
  }
  const Sequence& failed = *together[1];
  EXPECT_EQ(failed.result().stop_reason, "error");
  EXPECT_NE(failed.status().message().find("KV cache is full"), std::string::npos)
      << failed.status().message();
  // It got as far as its four blocks allow: 100 prompt tokens and 28 fed back, plus the last
  // sampled token, which did not fit.
  ASSERT_EQ(failed.result().new_ids.size(), 29u);
  EXPECT_EQ(failed.result().new_ids,
            std::vector<int32_t>(alone[1].new_ids.begin(), alone[1].new_ids.begin() + 29));
}

TEST(Sequences, APromptThatDoesNotFitTheBlocksLeftFailsAlone) {
  EngineOptions options;
  options.context = 256;
  options.max_sequences = 1;
  options.kv_block_tokens = 32;
  auto engine = Load(options);
  ASSERT_TRUE(engine);
  // The short ones are admitted first and keep a block each; 230 tokens need all 8.
  const std::vector<Request> requests = {
      {Prompt(5, 7), Greedy(10, true)},
      {Prompt(6, 8), Greedy(10, true)},
      {Prompt(230, 9), Greedy(4, true)},
  };
  const auto alone = RunAlone(*engine, requests);
  const auto together = RunTogether(*engine, requests);
  ASSERT_EQ(together.size(), requests.size());
  EXPECT_EQ(together[0]->result().new_ids, alone[0].new_ids);
  EXPECT_EQ(together[1]->result().new_ids, alone[1].new_ids);
  EXPECT_EQ(together[2]->result().stop_reason, "error");
  EXPECT_TRUE(together[2]->result().new_ids.empty());
  EXPECT_NE(together[2]->status().message().find("KV cache is full"), std::string::npos)
      << together[2]->status().message();
}

TEST(Step, AnOutOfVocabularyTokenFailsOnlyItsInput) {
  EngineOptions options;
  options.context = 256;
  options.max_sequences = 4;
  options.load_tokenizer = false;
  auto engine = Load(options);
  ASSERT_TRUE(engine);
  const auto prompt_a = Prompt(7, 10), prompt_c = Prompt(12, 11);
  std::vector<float> want_a, want_c;
  {
    const SeqId a = engine->NewSequence(), c = engine->NewSequence();
    ASSERT_TRUE(engine->Prefill(a, prompt_a, false, &want_a).ok());
    ASSERT_TRUE(engine->Prefill(c, prompt_c, false, &want_c).ok());
    engine->FreeSequence(a);
    engine->FreeSequence(c);
  }
  const SeqId a = engine->NewSequence(), b = engine->NewSequence(), c = engine->NewSequence();
  std::vector<int32_t> bad = Prompt(5, 12);
  bad[3] = 5000;
  const StepInput inputs[] = {{a, prompt_a, true}, {b, bad, true}, {c, prompt_c, true}};
  std::vector<StepOutput> outputs;
  ASSERT_TRUE(engine->Step(inputs, &outputs).ok());
  ASSERT_EQ(outputs.size(), 3u);
  EXPECT_FALSE(outputs[1].status.ok());
  EXPECT_NE(outputs[1].status.message().find("vocabulary"), std::string::npos)
      << outputs[1].status.message();
  EXPECT_TRUE(outputs[1].logits.empty());
  EXPECT_EQ(engine->SequenceLength(b), 0u);
  ASSERT_TRUE(outputs[0].status.ok()) << outputs[0].status.message();
  ASSERT_TRUE(outputs[2].status.ok()) << outputs[2].status.message();
  EXPECT_EQ(engine->SequenceLength(a), prompt_a.size());
  EXPECT_EQ(engine->SequenceLength(c), prompt_c.size());
  ASSERT_EQ(outputs[0].logits.size(), kVocab);
  ASSERT_EQ(outputs[2].logits.size(), kVocab);
  for (size_t i = 0; i < kVocab; ++i) {
    ASSERT_NEAR(outputs[0].logits[i], want_a[i], 1e-4) << i;
    ASSERT_NEAR(outputs[2].logits[i], want_c[i], 1e-4) << i;
  }

  // Other bad inputs fail alone too; the good one still runs.
  const int32_t one = 7;
  const std::vector<int32_t> none;
  const StepInput more[] = {{a, {&one, 1}, true},
                            {a, {&one, 1}, true},    // twice
                            {b, none, true},         // no tokens
                            {99, {&one, 1}, true}};  // no such sequence
  ASSERT_TRUE(engine->Step(more, &outputs).ok());
  EXPECT_TRUE(outputs[0].status.ok());
  EXPECT_NE(outputs[1].status.message().find("already appears"), std::string::npos);
  EXPECT_NE(outputs[2].status.message().find("no tokens"), std::string::npos);
  EXPECT_NE(outputs[3].status.message().find("does not exist"), std::string::npos);
  EXPECT_EQ(engine->SequenceLength(a), prompt_a.size() + 1);

  // More tokens than a batch may hold is the caller's error: nothing runs.
  const std::vector<int32_t> huge(engine->options().max_batch_tokens + 1, 7);
  const StepInput too_many[] = {{c, huge, true}};
  EXPECT_FALSE(engine->Step(too_many, &outputs).ok());
  EXPECT_FALSE(outputs[0].status.ok());
  EXPECT_EQ(engine->SequenceLength(c), prompt_c.size());
}

// Seven forks share a partly filled last block with no other owner left: six need a private
// copy and the last then owns the block, so six free blocks hold all seven although each one's
// bound (a copy apiece) would not.
TEST(Step, ForksThatShareTheirLastBlockAreAdmittedByExactNeed) {
  EngineOptions options;
  options.context = 128;
  options.max_sequences = 1;
  options.load_tokenizer = false;
  auto engine = Load(options);  // 8 blocks of 16 tokens
  ASSERT_TRUE(engine);
  const SeqId root = engine->NewSequence();
  std::vector<float> logits;
  ASSERT_TRUE(engine->Prefill(root, Prompt(20, 18), false, &logits).ok());
  std::vector<SeqId> forks;
  for (int i = 0; i < 7; ++i) {
    auto fork = engine->ForkSequence(root);
    ASSERT_TRUE(fork.ok());
    forks.push_back(*fork);
  }
  engine->FreeSequence(root);
  std::vector<int32_t> next(7);
  std::vector<StepInput> inputs;
  for (size_t i = 0; i < forks.size(); ++i) {
    next[i] = int32_t(100 + i);
    inputs.push_back({forks[i], {&next[i], 1}, true});
  }
  std::vector<StepOutput> outputs;
  ASSERT_TRUE(engine->Step(inputs, &outputs).ok());
  for (size_t i = 0; i < forks.size(); ++i) {
    EXPECT_TRUE(outputs[i].status.ok()) << i << ": " << outputs[i].status.message();
    EXPECT_EQ(engine->SequenceLength(forks[i]), 21u);
  }
  // Every block is in use now: one more token each fits (the blocks have room), and the forks
  // still see the prompt they share.
  const SeqId alone = engine->NewSequence();
  const StepInput one_more[] = {{forks[0], {&next[1], 1}, true}, {alone, {&next[0], 1}, true}};
  ASSERT_TRUE(engine->Step(one_more, &outputs).ok());
  EXPECT_TRUE(outputs[0].status.ok()) << outputs[0].status.message();
  EXPECT_NE(outputs[1].status.message().find("KV cache is full"), std::string::npos)
      << outputs[1].status.message();
  std::vector<float> want;
  const SeqId check = forks[6];
  engine->FreeSequence(forks[4]);  // room for a fresh sequence
  engine->FreeSequence(forks[5]);
  const SeqId fresh = engine->NewSequence();
  std::vector<int32_t> ids = Prompt(20, 18);
  ids.push_back(next[6]);
  ids.push_back(7);
  ASSERT_TRUE(engine->Prefill(fresh, ids, false, &want).ok());
  const int32_t seven = 7;
  const StepInput last[] = {{check, {&seven, 1}, true}};
  ASSERT_TRUE(engine->Step(last, &outputs).ok());
  ASSERT_TRUE(outputs[0].status.ok()) << outputs[0].status.message();
  for (size_t v = 0; v < kVocab; ++v) ASSERT_NEAR(outputs[0].logits[v], want[v], 1e-4) << v;
}

// Step's own work reuses the engine's scratch: it allocates no more than Decode does for the
// same batch.
TEST(Step, SteadyDecodingAllocatesNoMoreThanDecode) {
  EngineOptions options;
  options.context = 256;
  options.max_sequences = 4;
  options.load_tokenizer = false;
  auto engine = Load(options);
  ASSERT_TRUE(engine);
  std::vector<SeqId> seqs;
  std::vector<float> logits;
  for (int32_t s = 0; s < 3; ++s) {
    seqs.push_back(engine->NewSequence());
    ASSERT_TRUE(engine->Prefill(seqs.back(), Prompt(5 + size_t(s), s), false, &logits).ok());
  }
  std::vector<int32_t> next = {11, 12, 13};
  std::vector<StepInput> inputs;
  for (size_t s = 0; s < seqs.size(); ++s) inputs.push_back({seqs[s], {&next[s], 1}, true});
  std::vector<StepOutput> outputs;
  Batch batch;
  size_t step_allocations = 0, decode_allocations = 0;
  for (int round = 0; round < 6; ++round) {
    const size_t before_step = g_allocations;
    ASSERT_TRUE(engine->Step(inputs, &outputs).ok());
    const size_t after_step = g_allocations;
    batch.Clear();
    for (size_t s = 0; s < seqs.size(); ++s) {
      batch.Add(next[s], int32_t(engine->SequenceLength(seqs[s])), seqs[s], true);
    }
    const size_t before_decode = g_allocations;
    ASSERT_TRUE(engine->Decode(batch, &logits).ok());
    const size_t after_decode = g_allocations;
    if (round >= 2) {  // scratch has grown
      step_allocations += after_step - before_step;
      decode_allocations += after_decode - before_decode;
    }
  }
  EXPECT_LE(step_allocations, decode_allocations);
  std::printf("allocations over 4 steps: Step %zu, Decode %zu\n", step_allocations,
              decode_allocations);
}

TEST(Step, AnInputPastTheContextFailsAlone) {
  EngineOptions options;
  options.context = 32;
  options.max_sequences = 2;
  options.load_tokenizer = false;
  auto engine = Load(options);
  ASSERT_TRUE(engine);
  const SeqId a = engine->NewSequence(), b = engine->NewSequence();
  const auto long_prompt = Prompt(33, 13), short_prompt = Prompt(8, 14);
  const StepInput inputs[] = {{a, long_prompt, true}, {b, short_prompt, true}};
  std::vector<StepOutput> outputs;
  ASSERT_TRUE(engine->Step(inputs, &outputs).ok());
  EXPECT_NE(outputs[0].status.message().find("context"), std::string::npos)
      << outputs[0].status.message();
  EXPECT_TRUE(outputs[1].status.ok());
  EXPECT_EQ(engine->SequenceLength(a), 0u);
  EXPECT_EQ(engine->SequenceLength(b), 8u);
}

TEST(Sequences, OneThatFillsItsContextStopsWithReasonContext) {
  EngineOptions options;
  options.context = 64;
  options.max_sequences = 2;
  auto engine = Load(options);
  ASSERT_TRUE(engine);
  // The cache holds the prompt and every sampled token but the last: 10 + 54 = 64.
  const std::vector<Request> requests = {{Prompt(10, 15), Greedy(100, true)},
                                         {Prompt(5, 16), Greedy(8, true)}};
  const auto alone = RunAlone(*engine, requests);
  EXPECT_EQ(alone[0].stop_reason, "context");
  EXPECT_EQ(alone[0].new_ids.size(), 55u);
  const auto together = RunTogether(*engine, requests);
  ASSERT_EQ(together.size(), 2u);
  EXPECT_EQ(together[0]->result().stop_reason, "context");
  EXPECT_EQ(together[0]->result().new_ids, alone[0].new_ids);
  EXPECT_EQ(together[1]->result().stop_reason, "length");
  EXPECT_EQ(together[1]->result().new_ids, alone[1].new_ids);

  // A per-sequence limit below the engine's.
  GenerateOptions limited = Greedy(100, true);
  limited.context = 20;
  const SeqId seq = engine->NewSequence();
  auto result = Generate(*engine, seq, Prompt(10, 15), limited, nullptr);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->stop_reason, "context");
  EXPECT_EQ(result->new_ids.size(), 11u);
  EXPECT_EQ(engine->SequenceLength(seq), 20u);
  EXPECT_EQ(result->new_ids,
            std::vector<int32_t>(alone[0].new_ids.begin(), alone[0].new_ids.begin() + 11));
  // A prompt longer than the limit is refused before anything runs.
  EXPECT_FALSE(Sequence::Create(*engine, seq, Prompt(10, 15), limited).ok());
  engine->FreeSequence(seq);
}

// A context shift keeps the first `keep` tokens, drops half of the rest and feeds the survivors
// again: the engine sequence then holds exactly what held() says, starting with the kept
// tokens, and its logits are those of a fresh sequence given the same tokens.
TEST(Sequences, AContextShiftKeepsThePrefixAndRecomputesTheRest) {
  EngineOptions options;
  options.context = 32;
  options.max_sequences = 2;  // and a fresh sequence to compare with
  auto engine = Load(options);
  ASSERT_TRUE(engine);
  const std::vector<int32_t> prompt = Prompt(10, 21);
  const auto unshifted = RunAlone(*engine, {{prompt, Greedy(60, true)}});
  ASSERT_EQ(unshifted[0].stop_reason, "context");
  ASSERT_EQ(unshifted[0].new_ids.size(), 23u);  // 32 - 10 + 1: the last one is never fed

  GenerateOptions shifting = Greedy(60, true);
  shifting.context_shift = true;
  shifting.keep = 5;
  const SeqId seq = engine->NewSequence();
  auto sequence = Sequence::Create(*engine, seq, prompt, shifting);
  ASSERT_TRUE(sequence.ok()) << sequence.status().message();
  Sequence& s = **sequence;
  const SeqId fresh = engine->NewSequence();
  std::vector<StepOutput> outputs;
  std::vector<float> want;
  size_t recomputed = 0;  // shifts whose recomputation was checked
  while (!s.finished()) {
    const bool recomputing = s.prefilling() && s.result().context_shifts > 0;
    const StepInput input = s.NextInput(engine->options().max_batch_tokens);
    ASSERT_TRUE(engine->Step({&input, 1}, &outputs).ok());
    ASSERT_TRUE(outputs[0].status.ok()) << outputs[0].status.message();
    if (recomputing) {
      SCOPED_TRACE(s.result().context_shifts);
      // Length 32 = keep 5 + dropped 13 + 14 survivors; they and the sampled token are fed.
      ASSERT_EQ(s.held().size(), 5u);
      EXPECT_EQ(input.tokens.size(), 15u);
      EXPECT_TRUE(std::equal(prompt.begin(), prompt.begin() + 5, s.held().begin()));
      std::vector<int32_t> tokens = s.held();
      tokens.insert(tokens.end(), input.tokens.begin(), input.tokens.end());
      ASSERT_TRUE(engine->TruncateSequence(fresh, 0).ok());
      ASSERT_TRUE(engine->Prefill(fresh, tokens, false, &want).ok());
      ASSERT_EQ(outputs[0].logits.size(), kVocab);
      for (size_t v = 0; v < kVocab; ++v) ASSERT_NEAR(outputs[0].logits[v], want[v], 1e-4) << v;
      s.Consume(outputs[0]);
      EXPECT_EQ(engine->SequenceLength(seq), 20u);
      EXPECT_EQ(s.held(), tokens);
      ++recomputed;
      continue;
    }
    s.Consume(outputs[0]);
    EXPECT_EQ(engine->SequenceLength(seq), s.held().size());
  }
  const GenerateResult& result = s.result();
  EXPECT_EQ(result.stop_reason, "length");
  EXPECT_EQ(result.new_ids.size(), 60u);
  // 23 tokens fill the context, then every 13 more (19 held + 13 = 32).
  EXPECT_EQ(result.context_shifts, 3u);
  EXPECT_EQ(recomputed, 3u);
  EXPECT_EQ(std::vector<int32_t>(result.new_ids.begin(), result.new_ids.begin() + 23),
            unshifted[0].new_ids);
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.begin() + 5, s.held().begin()));
  engine->FreeSequence(fresh);
  engine->FreeSequence(seq);
}

// Tokens the cache held before the sequence began are recomputed only when the caller names
// them; otherwise a shift that would need them stops the sequence at the context instead.
TEST(Sequences, AShiftNeedsTheCachedTokensItRecomputes) {
  EngineOptions options;
  options.context = 32;
  auto engine = Load(options);
  ASSERT_TRUE(engine);
  GenerateOptions shifting = Greedy(40, true);
  shifting.context_shift = true;
  shifting.keep = 2;
  const std::vector<int32_t> cached = Prompt(20, 22);
  std::vector<float> logits;
  for (const bool named : {false, true}) {
    SCOPED_TRACE(named);
    const SeqId seq = engine->NewSequence();
    ASSERT_TRUE(engine->Prefill(seq, cached, false, &logits).ok());
    auto sequence = Sequence::Create(*engine, seq, {5, 6, 7, 8}, shifting, nullptr,
                                     named ? std::span<const int32_t>(cached)
                                           : std::span<const int32_t>());
    ASSERT_TRUE(sequence.ok()) << sequence.status().message();
    Sequence* const sequences[] = {sequence->get()};
    RunSequences(*engine, sequences);
    const GenerateResult& result = (*sequence)->result();
    if (named) {
      EXPECT_EQ(result.stop_reason, "length");
      EXPECT_EQ(result.new_ids.size(), 40u);
      EXPECT_GE(result.context_shifts, 1u);
    } else {
      // Dropping 15 after the 2 kept leaves positions 17..19 to recompute, which it never saw.
      EXPECT_EQ(result.stop_reason, "context");
      EXPECT_EQ(result.new_ids.size(), 32u - 24u + 1u);
      EXPECT_EQ(result.context_shifts, 0u);
      EXPECT_EQ((*sequence)->held()[0], -1);
    }
    EXPECT_EQ((*sequence)->held().size(), engine->SequenceLength(seq));
    engine->FreeSequence(seq);
  }
  // A keep past the context, and cached tokens that are not what the sequence holds.
  const SeqId seq = engine->NewSequence();
  GenerateOptions too_much = shifting;
  too_much.keep = 33;
  auto refused = Sequence::Create(*engine, seq, {5, 6}, too_much);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("keep 33 exceeds the context of 32"),
            std::string::npos);
  refused = Sequence::Create(*engine, seq, {5, 6}, shifting, nullptr, cached);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("holds 0 tokens, but 20 cached tokens were named"),
            std::string::npos);
  engine->FreeSequence(seq);
}

TEST(Sequences, CancelReleasesHeldBackTextAndAStepThatWasNotFedChangesNothing) {
  EngineOptions options;
  options.context = 128;
  auto engine = Load(options);
  ASSERT_TRUE(engine);
  const SeqId seq = engine->NewSequence();
  auto sequence = Sequence::Create(*engine, seq, Prompt(6, 17), Greedy(50, true));
  ASSERT_TRUE(sequence.ok());
  Sequence& s = **sequence;
  EXPECT_TRUE(s.prefilling());
  std::vector<StepOutput> outputs;
  for (int step = 0; step < 4; ++step) {
    const StepInput input = s.NextInput(engine->options().max_batch_tokens);
    ASSERT_FALSE(input.tokens.empty());
    ASSERT_TRUE(engine->Step({&input, 1}, &outputs).ok());
    s.Consume(outputs[0]);
  }
  EXPECT_FALSE(s.prefilling());
  EXPECT_EQ(s.result().new_ids.size(), 4u);
  EXPECT_EQ(engine->SequenceLength(seq), 6u + 3u);
  s.Cancel();
  EXPECT_TRUE(s.finished());
  EXPECT_EQ(s.result().stop_reason, "cancelled");
  EXPECT_TRUE(s.NextInput(16).tokens.empty());
  engine->FreeSequence(seq);
}

}  // namespace
}  // namespace petrel
