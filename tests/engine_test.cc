// Engine behaviour: batching invariance, split placement across backends, decode errors.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/runtime/backend_registry.h"
#include "core/runtime/engine.h"
#include "cpu/cpu_backend.h"
#include "cpu/host_backend.h"  // HostBackend::WrapHostMemory
#include "quant/quantize.h"
#include "core/generation/sampling/sampler.h"
#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::SharedDir;

std::string StoryGguf() { return SharedDir() + "/models/story-gguf/story-f32.gguf"; }
std::string SynthF32() { return SharedDir() + "/models/synth-tiny/tiny-v2048-f32.gguf"; }

std::unique_ptr<Engine> Load(const std::string& path, EngineOptions options = {}) {
  options.n_threads = options.n_threads ? options.n_threads : 2;
  options.context = 256;
  options.load_tokenizer = false;
  options.max_sequences = 4;
  auto engine = Engine::Load(path, options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

// Host arrays as the values of a host backend's node, in place: value i is views()[i].
class HostValues {
 public:
  explicit HostValues(std::initializer_list<TensorView> arrays) {
    for (const TensorView& array : arrays) {
      buffers_.push_back(HostBackend::WrapHostMemory(array.data, array.desc.bytes()));
      views_.push_back(ValueView{buffers_.back().get(), 0, array.desc});
    }
  }
  const ValueView* views() const { return views_.data(); }
  BackendBuffer* buffer(size_t i) const { return buffers_[i].get(); }

 private:
  std::vector<std::unique_ptr<BackendBuffer>> buffers_;
  std::vector<ValueView> views_;
};

std::vector<float> NormalFloats(std::mt19937& gen, size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = normal(gen);
  return v;
}

std::vector<int32_t> Prompt(size_t length, int32_t salt) {
  std::vector<int32_t> ids = {1};
  for (size_t i = 1; i < length; ++i) ids.push_back(int32_t(3 + (i * 131 + size_t(salt) * 977) % 2000));
  return ids;
}

TEST(Batching, FourSequencesTogetherMatchEachAlone) {
  auto engine = Load(StoryGguf());
  ASSERT_TRUE(engine);
  const size_t n_vocab = 2048, n_steps = 12;
  const std::vector<size_t> lengths = {3, 7, 12, 20};
  // Alone: prompt logits at every position, then greedy steps.
  std::vector<std::vector<float>> alone_logits;
  std::vector<std::vector<int32_t>> alone_tokens;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const auto prompt = Prompt(lengths[s], int32_t(s));
    const SeqId seq = engine->NewSequence();
    std::vector<float> logits;
    ASSERT_TRUE(engine->Prefill(seq, prompt, true, &logits).ok());
    alone_logits.push_back(logits);
    std::vector<int32_t> tokens;
    int32_t token = ArgMax(logits.data() + logits.size() - n_vocab, n_vocab);
    for (size_t step = 0; step < n_steps; ++step) {
      tokens.push_back(token);
      Batch batch;
      batch.Add(token, int32_t(engine->SequenceLength(seq)), seq, true);
      ASSERT_TRUE(engine->Decode(batch, &logits).ok());
      token = ArgMax(logits.data(), n_vocab);
    }
    alone_tokens.push_back(tokens);
    engine->FreeSequence(seq);
  }
  // Together: all prompts interleaved in one batch, then one token per sequence per step.
  std::vector<SeqId> seqs;
  Batch batch;
  std::vector<std::pair<size_t, size_t>> owner;  // batch row -> (sequence, position)
  for (size_t s = 0; s < lengths.size(); ++s) seqs.push_back(engine->NewSequence());
  for (size_t pos = 0; pos < 20; ++pos) {
    for (size_t s = 0; s < lengths.size(); ++s) {
      if (pos >= lengths[s]) continue;
      batch.Add(Prompt(lengths[s], int32_t(s))[pos], int32_t(pos), seqs[s], true);
      owner.push_back({s, pos});
    }
  }
  std::vector<float> logits;
  ASSERT_TRUE(engine->Decode(batch, &logits).ok());
  std::vector<int32_t> next(lengths.size());
  double worst = 0.0;
  for (size_t row = 0; row < owner.size(); ++row) {
    const auto [s, pos] = owner[row];
    std::vector<float> got(logits.begin() + long(row * n_vocab), logits.begin() + long((row + 1) * n_vocab));
    std::vector<float> want(alone_logits[s].begin() + long(pos * n_vocab), alone_logits[s].begin() + long((pos + 1) * n_vocab));
    const double max_abs = testing::CompareLogits(got, want, n_vocab).max_abs;
    worst = std::max(worst, max_abs);
    EXPECT_LE(max_abs, 1e-5) << "sequence " << s << " position " << pos;
    if (pos + 1 == lengths[s]) next[s] = ArgMax(got.data(), n_vocab);
  }
  std::vector<std::vector<int32_t>> together(lengths.size());
  for (size_t step = 0; step < n_steps; ++step) {
    batch.Clear();
    for (size_t s = 0; s < lengths.size(); ++s) {
      together[s].push_back(next[s]);
      batch.Add(next[s], int32_t(engine->SequenceLength(seqs[s])), seqs[s], true);
    }
    ASSERT_TRUE(engine->Decode(batch, &logits).ok());
    for (size_t s = 0; s < lengths.size(); ++s) next[s] = ArgMax(logits.data() + s * n_vocab, n_vocab);
  }
  for (size_t s = 0; s < lengths.size(); ++s) EXPECT_EQ(together[s], alone_tokens[s]) << "sequence " << s;
  std::printf("batched vs alone: max abs logit difference %.3g over %zu rows\n", worst, owner.size());
}

// A decode token at a context of several attention splits (kAttentionSplitKeys: split-K and
// shared-prefix attention come into play) gives the same logits, bit for bit, with 1, 2 or 3
// threads, alone or in a step beside other sequences, and with shared-prefix attention on or
// off while two sequences share its blocks.
TEST(Batching, LongContextDecodeIsTheSameBitsInAnyCompany) {
  const size_t n_vocab = 2048, length = 700;  // three splits
  const std::vector<int32_t> prompt = Prompt(length, 3);
  const int32_t next = 77;
  std::vector<float> reference;
  for (size_t threads : {1, 2, 3}) {
    for (bool shared : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << threads << " threads, shared-prefix attention " << (shared ? "on" : "off"));
      EngineOptions options;
      options.n_threads = threads;
      options.shared_prefix_attention = shared;
      options.context = 1024;
      options.load_tokenizer = false;
      options.max_sequences = 4;
      auto loaded = Engine::Load(SynthF32(), options);
      ASSERT_TRUE(loaded.ok()) << loaded.status().message();
      Engine& engine = **loaded;
      const SeqId a = engine.NewSequence();
      std::vector<float> logits;
      ASSERT_TRUE(engine.Prefill(a, prompt, false, &logits).ok());
      Batch batch;
      batch.Add(next, int32_t(length), a, true);
      ASSERT_TRUE(engine.Decode(batch, &logits).ok());
      if (reference.empty()) reference = logits;
      ASSERT_EQ(logits.size(), n_vocab);
      EXPECT_EQ(0, std::memcmp(logits.data(), reference.data(), n_vocab * sizeof(float)))
          << "alone";
      ASSERT_TRUE(engine.TruncateSequence(a, length).ok());
      // Two forks share every block of `a`; another sequence shares none.
      auto b = engine.ForkSequence(a), c = engine.ForkSequence(a);
      ASSERT_TRUE(b.ok() && c.ok());
      const SeqId d = engine.NewSequence();
      ASSERT_TRUE(engine.Prefill(d, Prompt(300, 5), false, &logits).ok());
      batch.Clear();
      batch.Add(5, 300, d, true);
      batch.Add(next, int32_t(length), *b, true);
      batch.Add(next, int32_t(length), a, true);
      batch.Add(next + 1, int32_t(length), *c, true);
      ASSERT_TRUE(engine.Decode(batch, &logits).ok());
      for (size_t row : {1, 2}) {
        EXPECT_EQ(0, std::memcmp(logits.data() + row * n_vocab, reference.data(),
                                 n_vocab * sizeof(float)))
            << "batch row " << row;
      }
    }
  }
}

void CheckSplitPlacement(const std::string& path, const std::vector<int32_t>& ids) {
  auto cpu = Load(path);
  ASSERT_TRUE(cpu);
  EngineOptions split_options;
  split_options.device = "ref";
  split_options.device_layers = size_t(cpu->config().n_layers) / 2;
  auto split = Load(path, split_options);
  ASSERT_TRUE(split);
  EXPECT_NE(split->PlacementString().find("ref"), std::string::npos) << split->PlacementString();
  std::vector<float> want, got;
  ASSERT_TRUE(cpu->Prefill(cpu->NewSequence(), ids, true, &want).ok());
  ASSERT_TRUE(split->Prefill(split->NewSequence(), ids, true, &got).ok());
  const auto stats = testing::CompareLogits(got, want, size_t(cpu->config().n_vocab));
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << path << ": " << stats.ToString();
  std::printf("%s, %s vs all-CPU: %s\n", path.c_str(), split->PlacementString().c_str(), stats.ToString().c_str());
}

TEST(Placement, HalfTheStoryLayersOnRefMatchAllCpu) { CheckSplitPlacement(StoryGguf(), Prompt(40, 5)); }
TEST(Placement, HalfTheSynthLayersOnRefMatchAllCpu) { CheckSplitPlacement(SynthF32(), Prompt(24, 9)); }

// A `ref` backend that cannot run attention: the engine keeps the layers it was asked to place
// there on the CPU, says why, and gives the all-CPU logits.
class NoAttentionBackend final : public Backend {
 public:
  explicit NoAttentionBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const char* Name() const override { return "ref-no-attention"; }
  BackendId id() const override { return inner_->id(); }
  bool Supports(const Node& node) const override {
    return node.op != OpKind::kAttention && inner_->Supports(node);
  }
  bool SupportsKv(DType type) const override { return inner_->SupportsKv(type); }
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) override { return inner_->Allocate(bytes); }
  Result<TensorView> PrepareWeight(const TensorView& view) override { return inner_->PrepareWeight(view); }
  Status CopyToHost(const BackendBuffer& src, size_t offset, void* dst, size_t bytes) override {
    return inner_->CopyToHost(src, offset, dst, bytes);
  }
  Status CopyFromHost(const void* src, BackendBuffer& dst, size_t offset, size_t bytes) override {
    return inner_->CopyFromHost(src, dst, offset, bytes);
  }
  Status CopyWithin(const BackendBuffer& src, size_t src_offset, BackendBuffer& dst,
                    size_t dst_offset, size_t bytes) override {
    return inner_->CopyWithin(src, src_offset, dst, dst_offset, bytes);
  }
  Status Synchronize() override { return inner_->Synchronize(); }
  Status BeginBatch(const BatchContext& batch) override { return inner_->BeginBatch(batch); }
  Status Run(const Node& node, const ValueView* values, const KvLayerView* kv) override {
    if (node.op == OpKind::kAttention) return Error("attention placed on a backend without it");
    return inner_->Run(node, values, kv);
  }
  Status Submit() override { return inner_->Submit(); }

 private:
  std::unique_ptr<Backend> inner_;
};

TEST(Placement, LayersADeviceCannotRunStayOnTheCpu) {
  static const Status registered = RegisterBackend(
      {"ref-no-attention", [](BackendId id, const BackendOptions& options) -> Result<std::unique_ptr<Backend>> {
         PETREL_ASSIGN_OR_RETURN(std::unique_ptr<Backend> ref, CreateBackend("ref", id, options));
         return std::unique_ptr<Backend>(std::make_unique<NoAttentionBackend>(std::move(ref)));
       },
       nullptr});
  ASSERT_TRUE(registered.ok()) << registered.message();
  auto cpu = Load(StoryGguf());
  ASSERT_TRUE(cpu);
  EngineOptions options;
  options.device = "ref-no-attention";
  options.device_layers = size_t(cpu->config().n_layers) + 1;  // every block and the output head
  auto limited = Load(StoryGguf(), options);
  ASSERT_TRUE(limited);
  const std::string placement = limited->PlacementString();
  EXPECT_NE(placement.find("output: ref-no-attention"), std::string::npos) << placement;
  EXPECT_NE(placement.find("layer 0 on cpu: ref-no-attention does not run attention"),
            std::string::npos) << placement;
  EXPECT_EQ(placement.find("layers 0-" + std::to_string(cpu->config().n_layers - 1) + ": cpu"), 0u)
      << placement;
  const std::vector<int32_t> ids = Prompt(24, 3);
  std::vector<float> want, got;
  ASSERT_TRUE(cpu->Prefill(cpu->NewSequence(), ids, true, &want).ok());
  ASSERT_TRUE(limited->Prefill(limited->NewSequence(), ids, true, &got).ok());
  const auto stats = testing::CompareLogits(got, want, size_t(cpu->config().n_vocab));
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
}

TEST(Placement, UnknownDeviceIsAnError) {
  EngineOptions options;
  options.device = "quantum";
  options.device_layers = 1;
  auto engine = Engine::Load(StoryGguf(), options);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("unknown device"), std::string::npos);
}

TEST(DecodeErrors, BadRequestsChangeNothing) {
  auto engine = Load(StoryGguf());
  ASSERT_TRUE(engine);
  const SeqId seq = engine->NewSequence();
  std::vector<float> logits;
  Batch batch;
  batch.Add(5000, 0, seq, true);  // outside the vocabulary
  EXPECT_FALSE(engine->Decode(batch, &logits).ok());
  batch.Clear();
  batch.Add(1, 3, seq, true);  // does not continue the sequence
  EXPECT_FALSE(engine->Decode(batch, &logits).ok());
  batch.Clear();
  batch.Add(1, 0, 99, true);  // unknown sequence
  EXPECT_FALSE(engine->Decode(batch, &logits).ok());
  EXPECT_EQ(engine->SequenceLength(seq), 0u);
  std::vector<int32_t> too_long(300, 5);  // context is 256
  EXPECT_FALSE(engine->Prefill(seq, too_long, false, &logits).ok());
  batch.Clear();
  batch.Add(1, 0, seq, true);
  EXPECT_TRUE(engine->Decode(batch, &logits).ok());
  EXPECT_EQ(engine->SequenceLength(seq), 1u);
}

TEST(MicroBatching, PassesOfEightGiveTheLogitsOfOnePass) {
  EngineOptions one_pass, passes_of_eight;
  one_pass.ubatch_tokens = 64;
  passes_of_eight.ubatch_tokens = 8;
  auto a = Load(StoryGguf(), one_pass), b = Load(StoryGguf(), passes_of_eight);
  ASSERT_TRUE(a && b);
  const auto prompt = Prompt(45, 3);
  std::vector<float> logits_a, logits_b;
  ASSERT_TRUE(a->Prefill(a->NewSequence(), prompt, true, &logits_a).ok());
  ASSERT_TRUE(b->Prefill(b->NewSequence(), prompt, true, &logits_b).ok());
  ASSERT_EQ(logits_a.size(), 45u * 2048u);
  ASSERT_EQ(logits_b.size(), logits_a.size());
  const auto stats = testing::CompareLogits(logits_b, logits_a, 2048);
  EXPECT_LE(stats.max_abs, 1e-4) << stats.ToString();
  EXPECT_EQ(stats.top1, 1.0);
}

// A value made on one backend and first read on another is copied when that reader runs: its
// home block must not be reused before then, even when its own backend never reads it. Here
// layer 0 (backend 0) makes a and then b, and layer 1 (backend 1) reads both.
TEST(ArenaLayout, AValueLivesAtHomeUntilItIsCopied) {
  Graph graph;
  const ValueId a = graph.Add(Node{OpKind::kAdd, 0}, 4, 64);
  const ValueId b = graph.Add(Node{OpKind::kAdd, 0}, 4, 64);
  graph.logits = graph.Add(Node{OpKind::kAdd, 1, {a, b}}, 4, 64);
  Placement placement;
  placement.layers = {0, 1};
  auto layout = LayOutArenas(graph, placement, 2);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  EXPECT_EQ(layout->home[size_t(a)].backend, 0);
  EXPECT_EQ(layout->home[size_t(b)].backend, 0);
  EXPECT_NE(layout->home[size_t(a)].offset, layout->home[size_t(b)].offset);
  EXPECT_NE(layout->copy_at[size_t(a)][1], layout->copy_at[size_t(b)][1]);
}

// Without --ubatch-size the engine picks the longest power-of-two pass (64 to the batch limit)
// whose activation arenas fit 1/kActivationShare of the weights.
TEST(MicroBatching, TheAutomaticSizeKeepsActivationsWithinTheirShare) {
  for (const std::string& path : {StoryGguf(), SynthF32()}) {
    SCOPED_TRACE(path);
    auto engine = Load(path);
    ASSERT_TRUE(engine);
    const size_t chosen = engine->options().ubatch_tokens;
    const LoadedModel& model = engine->model();
    auto arena = [&](size_t tokens) {
      Graph graph;
      model.arch->build_graph(model.config, model.weights, tokens, 1, &graph);
      auto layout = LayOutArenas(graph, engine->placement(), 1);
      EXPECT_TRUE(layout.ok());
      size_t bytes = 0;
      for (size_t b : layout->bytes) bytes += b;
      return bytes;
    };
    const size_t budget = model.weight_bytes / Engine::kActivationShare;
    EXPECT_GE(chosen, 64u);
    EXPECT_EQ(chosen & (chosen - 1), 0u) << chosen;
    if (chosen > 64) {
      EXPECT_LE(arena(chosen), budget);
    }
    if (chosen < engine->options().max_batch_tokens) {
      EXPECT_GT(arena(2 * chosen), budget);
    }
    // Arenas grow with the pass.
    EXPECT_LT(arena(64), arena(128));
  }
  EngineOptions short_batches;
  short_batches.max_batch_tokens = 32;
  // The rule itself, on arenas of 1000 bytes per token.
  auto linear = [](size_t tokens) -> Result<size_t> { return tokens * 1000; };
  EXPECT_EQ(*PickMicroBatch(25 * 1000 * 300, 25, 512, linear), 256u);
  EXPECT_EQ(*PickMicroBatch(25 * 1000 * 256, 25, 512, linear), 256u);
  EXPECT_EQ(*PickMicroBatch(25 * 1000 * 5000, 25, 512, linear), 512u);
  EXPECT_EQ(*PickMicroBatch(25 * 1000 * 5000, 25, 300, linear), 256u);
  EXPECT_EQ(*PickMicroBatch(1000, 25, 512, linear), 64u);  // never below 64
  EXPECT_EQ(*PickMicroBatch(1000, 25, 16, linear), 16u);
  auto failing = [](size_t) -> Result<size_t> { return Error("no layout"); };
  EXPECT_FALSE(PickMicroBatch(1000, 25, 512, failing).ok());
  auto engine = Load(StoryGguf(), short_batches);
  ASSERT_TRUE(engine);
  EXPECT_EQ(engine->options().ubatch_tokens, 32u);
}

TEST(MicroBatching, AnErrorInALaterPassUndoesTheEarlierOnes) {
  EngineOptions options;
  options.ubatch_tokens = 8;
  auto engine = Load(StoryGguf(), options);
  ASSERT_TRUE(engine);
  const SeqId seq = engine->NewSequence();
  Batch batch;
  for (int32_t i = 0; i < 20; ++i) batch.Add(i == 15 ? 5000 : 7, i, seq, true);
  std::vector<float> logits;
  const Status status = engine->Decode(batch, &logits);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("token 15"), std::string::npos) << status.message();
  EXPECT_EQ(engine->SequenceLength(seq), 0u);
  batch.Clear();
  batch.Add(1, 0, seq, true);
  EXPECT_TRUE(engine->Decode(batch, &logits).ok());
}

// The CPU backend quantizes a value's activations once for the mat_muls that read it in a row;
// a copy into the backend or any other op in between must make the next mat_mul quantize anew.
// gated_ffn gives the bits of gate and up mat_muls followed by silu_mul, for float and
// quantized weights, single tokens and prompts, on the CPU and reference backends.
TEST(CpuBackend, GatedFfnEqualsItsUnfusedOps) {
  constexpr size_t kIn = 96, kFf = 200;
  std::mt19937 gen(11);
  auto floats = [&](size_t n) { return NormalFloats(gen, n); };
  auto f32 = [](int64_t cols, int64_t rows, void* data) {
    return TensorView{TensorDesc::Make(DType::kF32, {cols, rows}), data, 0};
  };
  for (DType type : {DType::kF32, DType::kF16, DType::kQ4_0, DType::kQ8_0}) {
    const TensorDesc desc = TensorDesc::Make(type, {int64_t(kIn), int64_t(kFf)});
    std::vector<uint8_t> gate_bytes(desc.bytes()), up_bytes(desc.bytes());
    for (std::vector<uint8_t>* bytes : {&gate_bytes, &up_bytes}) {
      const std::vector<float> w = floats(kFf * kIn);
      for (size_t r = 0; r < kFf; ++r) {
        ASSERT_TRUE(QuantizeRow(type, w.data() + r * kIn, bytes->data() + r * desc.row_bytes(), kIn));
      }
    }
    const TensorView gate{desc, gate_bytes.data(), 0}, up{desc, up_bytes.data(), 0};
    for (size_t n_tokens : {size_t{1}, size_t{5}, size_t{70}}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(type) << ", " << n_tokens << " tokens");
      std::vector<float> x = floats(n_tokens * kIn);
      std::vector<float> g(n_tokens * kFf), u(n_tokens * kFf), act(n_tokens * kFf),
          fused(n_tokens * kFf);
      // Values: 0 = x, 1 = gate, 2 = up, 3 = silu_mul, 4 = gated_ffn.
      HostValues values({f32(kIn, n_tokens, x.data()), f32(kFf, n_tokens, g.data()),
                         f32(kFf, n_tokens, u.data()), f32(kFf, n_tokens, act.data()),
                         f32(kFf, n_tokens, fused.data())});
      Node gate_node{OpKind::kMatMul, 0, {0}};
      gate_node.weight = &gate;
      gate_node.output = 1;
      Node up_node{OpKind::kMatMul, 0, {0}};
      up_node.weight = &up;
      up_node.output = 2;
      Node silu_node{OpKind::kSiluMul, 0, {1, 2}};
      silu_node.output = 3;
      Node ffn_node{OpKind::kGatedFfn, 0, {0}};
      ffn_node.weight = &gate;
      ffn_node.weight_up = &up;
      ffn_node.output = 4;
      BatchContext batch;
      batch.n_tokens = n_tokens;
      for (const char* name : {"cpu", "ref"}) {
        auto backend = CreateBackend(name, 0, BackendOptions{2, false});
        ASSERT_TRUE(backend.ok());
        ASSERT_TRUE((*backend)->BeginBatch(batch).ok());
        for (const Node* node : {&gate_node, &up_node, &silu_node, &ffn_node}) {
          ASSERT_TRUE((*backend)->Run(*node, values.views(), nullptr).ok()) << name;
        }
        EXPECT_EQ(0, std::memcmp(act.data(), fused.data(), act.size() * sizeof(float))) << name;
      }
    }
  }
}

TEST(CpuBackend, SharedActivationQuantizationFollowsItsInput) {
  constexpr size_t kRows = 8, kIn = 64, kTokens = 3;
  std::mt19937 gen(7);
  auto floats = [&](size_t n) { return NormalFloats(gen, n); };
  const std::vector<float> w_f32 = floats(kRows * kIn);
  const TensorDesc w_desc = TensorDesc::Make(DType::kQ8_0, {int64_t(kIn), int64_t(kRows)});
  std::vector<uint8_t> w_bytes(w_desc.bytes());
  for (size_t r = 0; r < kRows; ++r) {
    ASSERT_TRUE(QuantizeRow(DType::kQ8_0, w_f32.data() + r * kIn,
                            w_bytes.data() + r * w_desc.row_bytes(), kIn));
  }
  const TensorView weight{w_desc, w_bytes.data(), 0};
  // Values: 0 = x, 1 = y (added to x in place), 2 and 3 = mat_mul outputs.
  std::vector<float> x = floats(kTokens * kIn), y = floats(kTokens * kIn);
  std::vector<float> out_a(kTokens * kRows), out_b(kTokens * kRows);
  auto f32 = [](int64_t cols, int64_t rows, void* data) {
    return TensorView{TensorDesc::Make(DType::kF32, {cols, rows}), data, 0};
  };
  HostValues values({f32(kIn, kTokens, x.data()), f32(kIn, kTokens, y.data()),
                     f32(kRows, kTokens, out_a.data()), f32(kRows, kTokens, out_b.data())});
  Node mat_mul_a{OpKind::kMatMul, 0, {0}};
  mat_mul_a.weight = &weight;
  mat_mul_a.output = 2;
  Node mat_mul_b = mat_mul_a;
  mat_mul_b.output = 3;
  Node add_in_place{OpKind::kAdd, 0, {0, 1}};
  add_in_place.output = 0;
  BatchContext batch;
  batch.n_tokens = kTokens;

  auto backend = CreateCpuBackend(0, 2, false);
  ASSERT_TRUE(backend.ok());
  auto fresh = [&]() {  // out_b as a backend with nothing cached computes it from today's x
    auto other = CreateCpuBackend(0, 2, false);
    EXPECT_TRUE(other.ok());
    EXPECT_TRUE((*other)->BeginBatch(batch).ok());
    EXPECT_TRUE((*other)->Run(mat_mul_b, values.views(), nullptr).ok());
    return out_b;
  };
  ASSERT_TRUE((*backend)->BeginBatch(batch).ok());
  ASSERT_TRUE((*backend)->Run(mat_mul_a, values.views(), nullptr).ok());
  ASSERT_TRUE((*backend)->Run(mat_mul_b, values.views(), nullptr).ok());
  EXPECT_EQ(out_a, out_b);  // shared and fresh quantization agree

  // A copy into the backend changes x.
  const std::vector<float> x2 = floats(kTokens * kIn);
  ASSERT_TRUE(
      (*backend)->CopyFromHost(x2.data(), *values.buffer(0), 0, x.size() * sizeof(float)).ok());
  ASSERT_TRUE((*backend)->Run(mat_mul_b, values.views(), nullptr).ok());
  std::vector<float> got = out_b;
  EXPECT_EQ(got, fresh());
  EXPECT_NE(got, out_a);

  // An op writes x in place.
  ASSERT_TRUE((*backend)->Run(mat_mul_a, values.views(), nullptr).ok());
  ASSERT_TRUE((*backend)->Run(add_in_place, values.views(), nullptr).ok());
  ASSERT_TRUE((*backend)->Run(mat_mul_b, values.views(), nullptr).ok());
  got = out_b;
  EXPECT_EQ(got, fresh());
  EXPECT_NE(got, out_a);
}

}  // namespace
}  // namespace petrel
