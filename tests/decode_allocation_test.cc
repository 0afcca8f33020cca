// The decode step allocates nothing on the heap in steady state: after a warm-up, decoding one
// token per step for several sequences makes no call to operator new, and the C heap holds the
// same bytes as before (scratch grown with malloc, as Highway's aligned allocations are, would
// show there). Its own executable: it replaces the global operator new to count calls.
#include <gtest/gtest.h>

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "core/runtime/engine.h"
#include "util/test_data.h"

namespace {
std::atomic<size_t> g_allocations{0};
}  // namespace

void* operator new(size_t bytes) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t bytes) { return operator new(bytes); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace petrel {
namespace {

// Bytes the C heap has handed out and not taken back (small blocks and mmapped ones).
size_t HeapBytesInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

TEST(DecodeAllocation, SteadyStateDecodeAllocatesNothing) {
  EngineOptions options;
  // One thread: with more, a worker that happens to claim its first chunk of some kernel late
  // grows that kernel's per-thread scratch once then (bounded, but not tied to a step number).
  options.n_threads = 1;
  options.context = 256;
  options.max_sequences = 3;
  auto engine = Engine::Load(testing::SharedDir() + "/models/story-gguf/story-q8_0.gguf", options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  Engine& e = **engine;
  std::vector<SeqId> seqs;
  std::vector<int32_t> lengths;
  std::vector<float> logits;
  for (int s = 0; s < 3; ++s) {
    seqs.push_back(e.NewSequence());
    std::vector<int32_t> prompt;
    for (int i = 0; i < 5 + 7 * s; ++i) prompt.push_back(1 + (i * 37 + s) % 200);
    ASSERT_TRUE(e.Prefill(seqs.back(), prompt, false, &logits).ok());
    lengths.push_back(int32_t(prompt.size()));
  }
  Batch batch;
  auto step = [&](int32_t token) {
    batch.Clear();
    for (size_t s = 0; s < seqs.size(); ++s) batch.Add(token, lengths[s]++, seqs[s], true);
    return e.Decode(batch, &logits);
  };
  // Warm-up: the first steps of a shape plan the executor and grow the scratch.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(step(10 + i).ok());
  const size_t before = g_allocations.load();
  const size_t heap_before = HeapBytesInUse();
  // 20 steps: every sequence crosses into a new KV block on the way.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(step(20 + i).ok());
  const size_t during = g_allocations.load() - before;
  EXPECT_EQ(during, 0u) << during << " allocations in 20 decode steps of 3 sequences";
  EXPECT_EQ(HeapBytesInUse(), heap_before) << "the heap grew during 20 decode steps";
}

TEST(DecodeAllocation, SteadyStateStepAllocatesNothing) {
  EngineOptions options;
  // One thread: with more, a worker that happens to claim its first chunk of some kernel late
  // grows that kernel's per-thread scratch once then (bounded, but not tied to a step number).
  options.n_threads = 1;
  options.context = 256;
  options.max_sequences = 3;
  auto engine = Engine::Load(testing::SharedDir() + "/models/story-gguf/story-q8_0.gguf", options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  Engine& e = **engine;
  std::vector<SeqId> seqs;
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < 3; ++s) {
    seqs.push_back(e.NewSequence());
    prompts.emplace_back();
    for (int i = 0; i < 5 + 7 * s; ++i) prompts.back().push_back(1 + (i * 37 + s) % 200);
  }
  std::vector<StepInput> inputs(seqs.size());
  std::vector<StepOutput> outputs;
  for (size_t s = 0; s < seqs.size(); ++s) inputs[s] = {seqs[s], prompts[s], true};
  ASSERT_TRUE(e.Step(inputs, &outputs).ok());  // the prompts, in one step
  std::vector<int32_t> next(seqs.size());
  auto step = [&]() {
    for (size_t s = 0; s < seqs.size(); ++s) {
      next[s] = int32_t(10 + s);
      inputs[s] = {seqs[s], std::span<const int32_t>(&next[s], 1), true};
    }
    const Status status = e.Step(inputs, &outputs);
    for (const StepOutput& output : outputs) EXPECT_TRUE(output.status.ok());
    return status;
  };
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(step().ok());
  const size_t before = g_allocations.load();
  const size_t heap_before = HeapBytesInUse();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(step().ok());
  const size_t during = g_allocations.load() - before;
  EXPECT_EQ(during, 0u) << during << " allocations in 20 steps of 3 sequences";
  EXPECT_EQ(HeapBytesInUse(), heap_before) << "the heap grew during 20 steps";
}

}  // namespace
}  // namespace petrel
