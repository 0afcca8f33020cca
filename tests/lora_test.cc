// LoRA adapters: random adapters written here as llama.cpp GGUF adapters and PEFT folders, applied
// at run time to the story model (and Phi-3's fused tensors), against the same adapters merged
// into a copy by QuantizeGgufModel; scale 0, repeated adapters, the ref backend, and every
// malformed adapter as a one-line error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/convert/quant_mix.h"
#include "core/convert/quantize_model.h"
#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/model/loader.h"
#include "core/model/lora_adapter.h"
#include "core/runtime/engine.h"
#include "util/test_data.h"
#include "util/tiny_model.h"

namespace petrel {
namespace {

std::string StoryGguf() { return testing::SharedDir() + "/models/story-gguf/story-f32.gguf"; }
std::string StoryHf() { return testing::SharedDir() + "/models/story"; }
std::string Phi3Gguf() { return testing::SharedDir() + "/models/synth-arch/phi3.gguf"; }
std::string Scratch(const std::string& name) {
  return testing::ScratchDir() + "/lora_test_" + name;
}

// One adapted matrix, in PEFT's layout: A (rank, n_in) and B (n_out, rank), row-major.
struct LoraPairData {
  std::string hf_module;    // "model.layers.0.self_attn.q_proj"
  std::string gguf_weight;  // "blk.0.attn_q.weight"
  int64_t n_in = 0, n_out = 0;
  bool rope_rows = false;  // Q or K: GGUF adapters store B's rows in the interleaved layout
  std::vector<float> a, b;
};

struct RandomAdapter {
  int rank = 4;
  float alpha = 8.0f;
  std::vector<LoraPairData> pairs;
};

struct Module {
  const char* hf;    // after "model.layers.<l>."
  const char* gguf;  // after "blk.<l>.", without ".weight"
  bool rope_rows;
};

// Random A and B for `modules` of every block of the GGUF model at `model_path`, shaped as its
// tensors are.
RandomAdapter MakeAdapter(const std::string& model_path, const std::vector<Module>& modules,
                          int rank, float alpha, unsigned seed) {
  auto file = GgufFile::Open(model_path);
  EXPECT_TRUE(file.ok()) << file.status().message();
  RandomAdapter adapter;
  adapter.rank = rank;
  adapter.alpha = alpha;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  for (int l = 0;; ++l) {
    bool any = false;
    for (const Module& module : modules) {
      LoraPairData pair;
      pair.hf_module = "model.layers." + std::to_string(l) + "." + module.hf;
      pair.gguf_weight = "blk." + std::to_string(l) + "." + module.gguf + ".weight";
      const GgufTensorInfo* info = (*file)->FindTensor(pair.gguf_weight);
      if (!info) continue;
      any = true;
      pair.n_in = info->desc.ne[0];
      pair.n_out = info->desc.ne[1];
      pair.rope_rows = module.rope_rows;
      pair.a.resize(size_t(rank * pair.n_in));
      pair.b.resize(size_t(pair.n_out * rank));
      for (float& v : pair.a) v = normal(rng);
      for (float& v : pair.b) v = normal(rng);
      adapter.pairs.push_back(std::move(pair));
    }
    if (!any) break;
  }
  return adapter;
}

const std::vector<Module> kLlamaModules = {
    {"self_attn.q_proj", "attn_q", true},  {"self_attn.k_proj", "attn_k", true},
    {"self_attn.v_proj", "attn_v", false}, {"self_attn.o_proj", "attn_output", false},
    {"mlp.gate_proj", "ffn_gate", false},  {"mlp.up_proj", "ffn_up", false},
    {"mlp.down_proj", "ffn_down", false},
};

RandomAdapter StoryAdapter(unsigned seed = 1) {
  return MakeAdapter(StoryGguf(), kLlamaModules, 4, 8.0f, seed);
}

// HF's half-split rows of each head [2][head_dim/2] as llama.cpp's interleaved pairs.
std::vector<float> InterleaveRows(const std::vector<float>& rows, int64_t n_rows, int64_t row_elems,
                                  int64_t head_dim) {
  std::vector<float> out(rows.size());
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t head = r / head_dim, within = r % head_dim;
    const int64_t src = head * head_dim + (within % 2) * half + within / 2;
    std::copy_n(rows.begin() + src * row_elems, row_elems, out.begin() + r * row_elems);
  }
  return out;
}

struct GgufAdapterOptions {
  std::string arch = "llama";
  bool write_alpha = true;
  float alpha_override = NAN;  // when set, written instead of the adapter's alpha
  int64_t head_dim = 16;       // the story model's
  bool permute = true;         // Q/K rows interleaved, as llama.cpp's converter writes them
};

void WriteGgufAdapter(const std::string& path, const RandomAdapter& adapter,
                      const GgufAdapterOptions& options = {}) {
  GgufWriter writer;
  writer.SetString("general.architecture", options.arch);
  writer.SetString("general.type", "adapter");
  writer.SetString("adapter.type", "lora");
  if (options.write_alpha) {
    writer.SetF32("adapter.lora.alpha",
                  std::isnan(options.alpha_override) ? adapter.alpha : options.alpha_override);
  }
  for (const LoraPairData& pair : adapter.pairs) {
    const int64_t rank = int64_t(pair.a.size()) / pair.n_in;
    const int64_t n_out = int64_t(pair.b.size()) / rank;
    std::vector<float> b = pair.b;
    if (pair.rope_rows && options.permute) b = InterleaveRows(b, n_out, rank, options.head_dim);
    auto a_data = std::make_shared<std::vector<float>>(pair.a);
    auto b_data = std::make_shared<std::vector<float>>(std::move(b));
    writer.AddTensor(pair.gguf_weight + ".lora_a", TensorDesc::Make(DType::kF32, {pair.n_in, rank}),
                     [a_data](void* dst) { std::memcpy(dst, a_data->data(), a_data->size() * 4); });
    writer.AddTensor(pair.gguf_weight + ".lora_b", TensorDesc::Make(DType::kF32, {rank, n_out}),
                     [b_data](void* dst) { std::memcpy(dst, b_data->data(), b_data->size() * 4); });
  }
  const Status status = writer.Write(path);
  ASSERT_TRUE(status.ok()) << status.message();
}

// A PEFT folder; `config` entries replace the defaults of adapter_config.json.
void WritePeftFolder(const std::string& folder, const RandomAdapter& adapter,
                     const nlohmann::json& config = nlohmann::json::object()) {
  std::filesystem::create_directories(folder);
  nlohmann::json json = {{"peft_type", "LORA"},
                         {"r", adapter.rank},
                         {"lora_alpha", adapter.alpha},
                         {"target_modules", {"q_proj", "k_proj", "v_proj", "o_proj"}},
                         {"use_rslora", false}};
  json.update(config);
  std::ofstream(folder + "/adapter_config.json") << json.dump(2);
  std::map<std::string, testing::F32Tensor> tensors;
  for (const LoraPairData& pair : adapter.pairs) {
    const int64_t rank = int64_t(pair.a.size()) / pair.n_in;
    const std::string stem = "base_model.model." + pair.hf_module;
    tensors[stem + ".lora_A.weight"] = {{rank, pair.n_in}, pair.a};
    tensors[stem + ".lora_B.weight"] = {{pair.n_out, rank}, pair.b};
  }
  ASSERT_EQ(testing::WriteF32Safetensors(folder + "/adapter_model.safetensors", tensors), "");
}

const std::vector<int32_t> kIds = {1,  80,  299, 285, 1482, 1943, 10, 33,  412, 7,   1200, 55,
                                   19, 940, 2,   301, 77,   1000, 5,  666, 42,  128, 1500, 9};

// The logits of every position of kIds.
std::vector<float> Logits(const std::string& model, const std::vector<LoraFile>& lora = {},
                          const std::string& device = "") {
  EngineOptions options;
  options.n_threads = 2;
  options.context = 64;
  options.load_tokenizer = false;
  options.lora = lora;
  if (!device.empty()) {
    options.device = device;
    options.device_layers = 1000;
  }
  auto engine = Engine::Load(model, options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  if (!engine.ok()) return {};
  const SeqId seq = (*engine)->NewSequence();
  std::vector<float> logits;
  const Status status = (*engine)->Prefill(seq, kIds, /*all_logits=*/true, &logits);
  EXPECT_TRUE(status.ok()) << status.message();
  return logits;
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size() || a.empty()) return INFINITY;
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

// `model` with `lora` merged into an F32 copy.
std::string Merged(const std::string& model, const std::vector<LoraFile>& lora,
                   const std::string& name) {
  const std::string out = Scratch(name + "_merged.gguf");
  const Status status =
      QuantizeGgufModel(model, out, *ParseQuantMix("F32"), false, {}, nullptr, "", lora);
  EXPECT_TRUE(status.ok()) << status.message();
  return out;
}

TEST(Lora, GgufAdapterAtRunTimeEqualsTheMergedModel) {
  const std::string adapter = Scratch("story.gguf");
  WriteGgufAdapter(adapter, StoryAdapter());
  const std::vector<LoraFile> lora = {{adapter, 1.0f, ""}};
  const auto base = Logits(StoryGguf());
  const auto at_run_time = Logits(StoryGguf(), lora);
  const auto merged = Logits(Merged(StoryGguf(), lora, "gguf"));
  const float diff = MaxAbsDiff(at_run_time, merged);
  std::printf("gguf adapter: run time vs merged max abs %.3g; vs base %.3g\n", diff,
              MaxAbsDiff(at_run_time, base));
  EXPECT_LE(diff, 1e-4f);
  EXPECT_GT(MaxAbsDiff(at_run_time, base), 0.05f) << "the adapter must change the logits";
}

TEST(Lora, ScaleZeroGivesTheBaseLogits) {
  const std::string adapter = Scratch("story_zero.gguf");
  WriteGgufAdapter(adapter, StoryAdapter());
  EXPECT_LE(MaxAbsDiff(Logits(StoryGguf(), {{adapter, 0.0f, ""}}), Logits(StoryGguf())), 1e-6f);
}

TEST(Lora, AdaptersAddUp) {
  const std::string adapter = Scratch("story_halves.gguf");
  WriteGgufAdapter(adapter, StoryAdapter());
  const auto halves = Logits(StoryGguf(), {{adapter, 0.5f, ""}, {adapter, 0.5f, ""}});
  EXPECT_LE(MaxAbsDiff(halves, Logits(StoryGguf(), {{adapter, 1.0f, ""}})), 1e-4f);
  // Two different adapters, merged together, as at run time.
  const std::string other = Scratch("story_other.gguf");
  WriteGgufAdapter(other, StoryAdapter(/*seed=*/9));
  const std::vector<LoraFile> both = {{adapter, 0.7f, ""}, {other, -0.4f, ""}};
  EXPECT_LE(MaxAbsDiff(Logits(StoryGguf(), both), Logits(Merged(StoryGguf(), both, "both"))),
            1e-4f);
}

// Sequences that choose different adapters and scales, decoded in one batch, each get the logits
// of an engine loaded with just their adapters.
TEST(Lora, SequencesWithDifferentAdaptersShareABatch) {
  const std::string first = Scratch("story_seq_a.gguf");
  const std::string second = Scratch("story_seq_b.gguf");
  WriteGgufAdapter(first, StoryAdapter());
  WriteGgufAdapter(second, StoryAdapter(/*seed=*/9));
  EngineOptions options;
  options.n_threads = 2;
  options.context = 64;
  options.max_sequences = 4;
  options.load_tokenizer = false;
  options.lora = {{first, 1.0f, ""}, {second, 0.5f, ""}};
  options.lora_per_sequence = true;
  auto engine = Engine::Load(StoryGguf(), options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  const struct {
    std::vector<float> scales;  // empty: as loaded
    std::vector<LoraFile> alone;
  } cases[] = {
      {{1.0f, 0.0f}, {{first, 1.0f, ""}}},
      {{0.0f, -0.4f}, {{second, -0.4f, ""}}},
      {{0.0f, 0.0f}, {}},
      {{}, {{first, 1.0f, ""}, {second, 0.5f, ""}}},
      {{0.3f, 2.0f}, {{first, 0.3f, ""}, {second, 2.0f, ""}}},
  };
  Batch batch;
  std::vector<SeqId> seqs;
  for (const auto& c : cases) {
    seqs.push_back((*engine)->NewSequence());
    ASSERT_TRUE((*engine)->SetSequenceLora(seqs.back(), c.scales).ok());
  }
  // Interleaved in chunks, as a server's step mixes prompt chunks.
  for (size_t begin = 0; begin < kIds.size(); begin += 8) {
    batch.Clear();
    for (size_t i = 0; i < std::size(cases); ++i) {
      for (size_t t = begin; t < begin + 8 && t < kIds.size(); ++t) {
        batch.Add(kIds[t], int32_t(t), seqs[i], t + 1 == kIds.size());
      }
    }
    std::vector<float> logits;
    ASSERT_TRUE((*engine)->Decode(batch, &logits).ok());
    if (begin + 8 < kIds.size()) continue;
    const size_t n_vocab = logits.size() / std::size(cases);
    for (size_t i = 0; i < std::size(cases); ++i) {
      const std::vector<float> solo = Logits(StoryGguf(), cases[i].alone);
      ASSERT_FALSE(solo.empty());
      const std::vector<float> last(solo.end() - long(n_vocab), solo.end());
      const std::vector<float> batched(logits.begin() + long(i * n_vocab),
                                       logits.begin() + long((i + 1) * n_vocab));
      EXPECT_LE(MaxAbsDiff(batched, last), 1e-4f) << "case " << i;
    }
  }
  // The choice is checked: the count, finite scales, and an empty sequence.
  EXPECT_FALSE((*engine)->SetSequenceLora(seqs[0], std::vector<float>{1.0f}).ok());
  EXPECT_FALSE((*engine)->SetSequenceLora(seqs[0], std::vector<float>{NAN, 0.0f}).ok());
  EXPECT_FALSE((*engine)->SetSequenceLora(seqs[0], std::vector<float>{0.0f, 0.0f}).ok());
  // A fork keeps its parent's adapters (so it continues as the parent would).
  auto child = (*engine)->ForkSequence(seqs[1]);
  ASSERT_TRUE(child.ok());
  EXPECT_TRUE((*engine)->SetSequenceLora(*child, std::vector<float>{0.0f, -0.4f}).ok());
  // Without lora_per_sequence every sequence has the loaded scales.
  options.lora_per_sequence = false;
  auto uniform = Engine::Load(StoryGguf(), options);
  ASSERT_TRUE(uniform.ok());
  const SeqId seq = (*uniform)->NewSequence();
  EXPECT_FALSE((*uniform)->SetSequenceLora(seq, std::vector<float>{1.0f, 0.0f}).ok());
  EXPECT_TRUE((*uniform)->SetSequenceLora(seq, std::vector<float>{1.0f, 0.5f}).ok());
}

TEST(Lora, PeftFolderEqualsTheMergedModelAndTheGgufAdapter) {
  const RandomAdapter adapter = StoryAdapter();
  const std::string folder = Scratch("story_peft");
  WritePeftFolder(folder, adapter);
  const std::string gguf = Scratch("story_same.gguf");
  WriteGgufAdapter(gguf, adapter);
  const std::vector<LoraFile> peft = {{folder, 1.0f, ""}};
  const auto at_run_time = Logits(StoryGguf(), peft);
  const auto merged = Logits(Merged(StoryGguf(), peft, "peft"));
  EXPECT_LE(MaxAbsDiff(at_run_time, merged), 1e-4f);
  // The same update from the GGUF adapter (Q/K rows interleaved) and on the HF folder (rows
  // half-split): the rows are matched to the model's layout either way.
  EXPECT_LE(MaxAbsDiff(at_run_time, Logits(StoryGguf(), {{gguf, 1.0f, ""}})), 1e-4f);
  EXPECT_LE(MaxAbsDiff(at_run_time, Logits(StoryHf(), peft)), 1e-4f);
  EXPECT_LE(MaxAbsDiff(at_run_time, Logits(StoryHf(), {{gguf, 1.0f, ""}})), 1e-4f);
}

TEST(Lora, RsLoraScalesByTheSquareRootOfTheRank) {
  RandomAdapter adapter = StoryAdapter();  // rank 4, alpha 8: factor 2
  const std::string plain = Scratch("story_plain");
  WritePeftFolder(plain, adapter);
  adapter.alpha = 4.0f;  // 4 / sqrt(4): factor 2 as well
  const std::string rslora = Scratch("story_rslora");
  WritePeftFolder(rslora, adapter, {{"use_rslora", true}});
  EXPECT_LE(MaxAbsDiff(Logits(StoryGguf(), {{plain, 1.0f, ""}}), Logits(StoryGguf(), {{rslora, 1.0f, ""}})),
            1e-5f);
}

TEST(Lora, RunsOnTheReferenceBackend) {
  const std::string adapter = Scratch("story_ref.gguf");
  WriteGgufAdapter(adapter, StoryAdapter());
  const std::vector<LoraFile> lora = {{adapter, 1.0f, ""}};
  EXPECT_LE(MaxAbsDiff(Logits(StoryGguf(), lora, "ref"), Logits(StoryGguf(), lora)), 1e-4f);
}

TEST(Lora, FusedPhi3TensorsAreAdaptedThroughTheirParts) {
  const RandomAdapter adapter = MakeAdapter(Phi3Gguf(),
                                            {{"self_attn.qkv_proj", "attn_qkv", false},
                                             {"mlp.gate_up_proj", "ffn_up", false},
                                             {"self_attn.o_proj", "attn_output", false}},
                                            4, 8.0f, 3);
  ASSERT_FALSE(adapter.pairs.empty());
  const std::string folder = Scratch("phi3_peft");
  WritePeftFolder(folder, adapter);
  const std::vector<LoraFile> lora = {{folder, 1.0f, ""}};
  const auto at_run_time = Logits(Phi3Gguf(), lora);
  EXPECT_LE(MaxAbsDiff(at_run_time, Logits(Merged(Phi3Gguf(), lora, "phi3"))), 1e-4f);
  EXPECT_GT(MaxAbsDiff(at_run_time, Logits(Phi3Gguf())), 1e-3f);
}

// The error of loading the story model with `lora`; "" when it loads.
std::string LoadError(const std::vector<LoraFile>& lora, const std::string& model = StoryGguf()) {
  LoadOptions options;
  options.load_tokenizer = false;
  options.lora = lora;
  auto loaded = LoadModel(model, options);
  return loaded.ok() ? "" : loaded.status().message();
}

void ExpectOneLineError(const std::string& message, const std::string& needle) {
  EXPECT_NE(message.find(needle), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(LoraErrors, GgufAdapters) {
  const RandomAdapter adapter = StoryAdapter();
  const std::string path = Scratch("bad.gguf");
  GgufAdapterOptions qwen;
  qwen.arch = "qwen2";
  WriteGgufAdapter(path, adapter, qwen);
  ExpectOneLineError(LoadError({{path, 1.0f, ""}}), "adapter for architecture 'qwen2'");

  GgufAdapterOptions negative;
  negative.alpha_override = -2.0f;
  WriteGgufAdapter(path, adapter, negative);
  ExpectOneLineError(LoadError({{path, 1.0f, ""}}), "adapter.lora.alpha -2 is invalid");

  RandomAdapter wrong_shape = adapter;
  wrong_shape.pairs[0].b.resize(wrong_shape.pairs[0].b.size() / 2);  // half the output rows
  wrong_shape.pairs[0].n_out /= 2;
  WriteGgufAdapter(path, wrong_shape);
  const std::string shape_error = LoadError({{path, 1.0f, ""}});
  ExpectOneLineError(shape_error, "blk.0.attn_q.weight");
  ExpectOneLineError(shape_error, "do not fit the model's [128, 128]");

  RandomAdapter missing = adapter;
  missing.pairs[0].gguf_weight = "blk.7.attn_q.weight";
  WriteGgufAdapter(path, missing);
  ExpectOneLineError(LoadError({{path, 1.0f, ""}}), "tensor blk.7.attn_q.weight does not exist");

  RandomAdapter embedding = adapter;
  embedding.pairs[0].gguf_weight = "token_embd.weight";
  embedding.pairs[0].rope_rows = false;
  WriteGgufAdapter(path, embedding);
  ExpectOneLineError(LoadError({{path, 1.0f, ""}}), "token embeddings is not supported");

  ExpectOneLineError(LoadError({{StoryGguf(), 1.0f, ""}}), "not a LoRA adapter");
  ExpectOneLineError(LoadError({{Scratch("absent.gguf"), 1.0f, ""}}), "no such LoRA adapter");
}

TEST(LoraErrors, HalfPairAndStrayTensors) {
  const std::string path = Scratch("half.gguf");
  GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  writer.SetString("general.type", "adapter");
  writer.SetString("adapter.type", "lora");
  writer.AddTensor("blk.0.attn_q.weight.lora_a", TensorDesc::Make(DType::kF32, {128, 4}),
                   [](void* dst) { std::memset(dst, 0, 128 * 4 * 4); });
  ASSERT_TRUE(writer.Write(path).ok());
  ExpectOneLineError(LoadError({{path, 1.0f, ""}}), "has lora A but not lora B");

  writer.AddTensor("blk.0.attn_norm.weight", TensorDesc::Make(DType::kF32, {128}),
                   [](void* dst) { std::memset(dst, 0, 128 * 4); });
  ASSERT_TRUE(writer.Write(path).ok());
  ExpectOneLineError(LoadError({{path, 1.0f, ""}}), "is not a LoRA tensor");
}

TEST(LoraErrors, PeftFolders) {
  const RandomAdapter adapter = StoryAdapter();
  const std::string folder = Scratch("bad_peft");
  WritePeftFolder(folder, adapter, {{"r", 0}});
  ExpectOneLineError(LoadError({{folder, 1.0f, ""}}), "r (the rank) must be a positive integer");
  WritePeftFolder(folder, adapter, {{"r", "four"}});
  ExpectOneLineError(LoadError({{folder, 1.0f, ""}}), "r (the rank) must be a positive integer");
  WritePeftFolder(folder, adapter, {{"r", 8}});
  ExpectOneLineError(LoadError({{folder, 1.0f, ""}}), "has rank 4 but the adapter declares r = 8");
  WritePeftFolder(folder, adapter, {{"lora_alpha", -1}});
  ExpectOneLineError(LoadError({{folder, 1.0f, ""}}), "lora_alpha must be a positive number");
  WritePeftFolder(folder, adapter, {{"lora_alpha", "x"}});
  ExpectOneLineError(LoadError({{folder, 1.0f, ""}}), "lora_alpha must be a positive number");
  WritePeftFolder(folder, adapter, {{"peft_type", "IA3"}});
  ExpectOneLineError(LoadError({{folder, 1.0f, ""}}), "is not LORA");
  WritePeftFolder(folder, adapter, {{"use_dora", true}});
  ExpectOneLineError(LoadError({{folder, 1.0f, ""}}), "DoRA");

  RandomAdapter wrong = adapter;
  wrong.pairs[1].n_in = 64;  // k_proj's A with half its columns
  wrong.pairs[1].a.resize(size_t(4 * 64));
  WritePeftFolder(folder, wrong);
  ExpectOneLineError(LoadError({{folder, 1.0f, ""}}), "model.layers.0.self_attn.k_proj.weight");

  RandomAdapter other_model = adapter;
  other_model.pairs[0].hf_module = "model.layers.0.self_attn.query";
  WritePeftFolder(folder, other_model);
  ExpectOneLineError(LoadError({{folder, 1.0f, ""}}),
                     "model.layers.0.self_attn.query.weight does not exist");

  std::filesystem::remove(folder + "/adapter_config.json");
  ExpectOneLineError(LoadError({{folder, 1.0f, ""}}), "adapter_config.json: cannot open");
}

TEST(LoraErrors, ArgumentParsing) {
  auto plain = ParseLoraArgument("a.gguf");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->path, "a.gguf");
  EXPECT_EQ(plain->scale, 1.0f);
  auto scaled = ParseLoraArgument("dir/a.gguf:0.25");
  ASSERT_TRUE(scaled.ok());
  EXPECT_EQ(scaled->path, "dir/a.gguf");
  EXPECT_EQ(scaled->scale, 0.25f);
  auto negative = ParseLoraArgument("a.gguf:-1.5");
  ASSERT_TRUE(negative.ok());
  EXPECT_EQ(negative->scale, -1.5f);
  auto colon = ParseLoraArgument("c:/x/a.gguf");  // not a number after the colon: all path
  ASSERT_TRUE(colon.ok());
  EXPECT_EQ(colon->path, "c:/x/a.gguf");
  EXPECT_FALSE(ParseLoraArgument(":1").ok());
  EXPECT_FALSE(ParseLoraArgument("a.gguf:inf").ok());
  // Names: the file's stem, or NAME=.
  EXPECT_EQ(plain->name, "a");
  EXPECT_EQ(ParseLoraArgument("peft/style/")->name, "style");
  auto named = ParseLoraArgument("terse=dir/a.gguf:0.5");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->name, "terse");
  EXPECT_EQ(named->path, "dir/a.gguf");
  EXPECT_EQ(named->scale, 0.5f);
  EXPECT_EQ(ParseLoraArgument("dir/x=y.gguf")->path, "dir/x=y.gguf");  // '/' is no name
  EXPECT_FALSE(ParseLoraArgument("name=").ok());
}

}  // namespace
}  // namespace petrel
