// OLMo 2, Granite and SmolLM3 from ../shared/models/synth-arch2 (GGUF as llama.cpp's converter
// writes it, and the HF folder) against the float64 reference of the golden README
// ("synth-arch2", F32 row: max abs <= 1e-3, rel RMS <= 1e-5, top-1 48/48, greedy ids exactly
// `greedy.new_ids` through single-token decode steps). Then one test per feature showing that
// it matters: OLMo 2 with its norms before the sublayers, Granite without each multiplier,
// SmolLM3 with RoPE on its NoPE layer or NoPE on another: each misses the golden logits by the
// README's ablation figure.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/convert/quantize_hf.h"
#include "core/convert/quantize_model.h"
#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/generation/generate.h"
#include "core/runtime/engine.h"
#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::SharedDir;

std::string ModelDir() { return SharedDir() + "/models/synth-arch2/"; }
std::string GoldenDir() { return SharedDir() + "/golden/synth-arch2/"; }
std::string Scratch(const std::string& name) {
  return testing::ScratchDir() + "/olmo2_granite_smollm3_" + name;
}

const nlohmann::json& Entry(const std::string& arch) {
  static const nlohmann::json parity = testing::ReadJson(GoldenDir() + "parity.json");
  return parity[arch];
}

std::unique_ptr<Engine> LoadEngine(const std::string& path, bool tokenizer,
                                   const std::string& device = "",
                                   std::function<void(ModelConfig&)> edit = nullptr) {
  EngineOptions options;
  if (!device.empty()) {
    options.device = device;
    options.device_layers = 1000;
  }
  options.n_threads = 2;
  options.context = 256;
  options.load_tokenizer = tokenizer;
  options.edit_config = std::move(edit);
  auto engine = Engine::Load(path, options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

std::vector<float> Logits(Engine& engine, const std::vector<int32_t>& ids) {
  const SeqId seq = engine.NewSequence();
  std::vector<float> logits;
  EXPECT_TRUE(engine.Prefill(seq, ids, /*all_logits=*/true, &logits).ok());
  engine.FreeSequence(seq);
  return logits;
}

std::vector<float> Golden(const std::string& arch) {
  return testing::ReadF32File(GoldenDir() + Entry(arch)["logits"].get<std::string>());
}

testing::LogitStats RunAgainstGolden(const std::string& arch, const std::string& path,
                                     const std::string& device = "",
                                     std::function<void(ModelConfig&)> edit = nullptr) {
  auto engine = LoadEngine(path, /*tokenizer=*/false, device, std::move(edit));
  if (!engine) return {INFINITY, INFINITY, 0.0};
  return testing::CompareLogits(Logits(*engine, Entry(arch)["ids"].get<std::vector<int32_t>>()),
                                Golden(arch), 2048);
}

struct Source {
  const char* arch;
  bool hf;  // the HF folder, else the GGUF
};

std::string PathOf(const Source& source) {
  return ModelDir() + source.arch + (source.hf ? "-hf" : ".gguf");
}

class Family : public ::testing::TestWithParam<Source> {};

TEST_P(Family, LogitsMatchTheReference) {
  const Source source = GetParam();
  for (const std::string device : {"", "ref"}) {
    const auto stats = RunAgainstGolden(source.arch, PathOf(source), device);
    EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance))
        << PathOf(source) << " on " << (device.empty() ? "cpu" : device) << ": "
        << stats.ToString();
    std::printf("%s on %s: %s\n", PathOf(source).c_str(), device.empty() ? "cpu" : device.c_str(),
                stats.ToString().c_str());
  }
}

// 8 prompt tokens in one batch, then 32 single-token steps through the KV cache.
TEST_P(Family, GreedyContinuationMatches) {
  const Source source = GetParam();
  auto engine = LoadEngine(PathOf(source), /*tokenizer=*/true);
  ASSERT_TRUE(engine);
  const nlohmann::json& greedy = Entry(source.arch)["greedy"];
  const auto prompt = greedy["prompt_ids"].get<std::vector<int32_t>>();
  const auto want = greedy["new_ids"].get<std::vector<int32_t>>();
  GenerateOptions options;
  options.max_new_tokens = want.size();
  options.sampling.temperature = 0.0f;
  options.ignore_eos = true;
  const SeqId seq = engine->NewSequence();
  auto result = Generate(*engine, seq, prompt, options, nullptr);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->new_ids, want) << PathOf(source);
}

INSTANTIATE_TEST_SUITE_P(Sources, Family,
                         ::testing::Values(Source{"olmo2", false}, Source{"olmo2", true},
                                           Source{"granite", false}, Source{"granite", true},
                                           Source{"smollm3", false}, Source{"smollm3", true}),
                         [](const auto& info) {
                           return std::string(info.param.arch) + (info.param.hf ? "_hf" : "_gguf");
                         });

// The HF folders through `petrel quantize` (F32): the GGUF each writes (Q/K rows permuted for
// Granite and SmolLM3, Granite's multiplier keys) reads back to the golden logits.
TEST(FamilyConvert, HfFolderToGgufKeepsParity) {
  for (const std::string arch : {"olmo2", "granite", "smollm3"}) {
    const std::string out = Scratch(arch + "_converted.gguf");
    const auto mix = ParseQuantMix("F32");
    ASSERT_TRUE(mix.has_value());
    const Status written = QuantizeHfFolder(ModelDir() + arch + "-hf", out, *mix, false);
    ASSERT_TRUE(written.ok()) << written.message();
    const auto stats = RunAgainstGolden(arch, out);
    EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << arch << ": " << stats.ToString();
    std::remove(out.c_str());
  }
}

// --- Each feature matters -----------------------------------------------------------------

// A copy of `arch`.gguf with some float keys set and some int32-array keys set.
std::string RewriteGguf(const std::string& arch, const std::string& name,
                        const std::map<std::string, float>& f32_keys,
                        const std::map<std::string, std::vector<int32_t>>& i32_arrays = {}) {
  auto in = GgufFile::Open(ModelDir() + arch + ".gguf");
  EXPECT_TRUE(in.ok()) << in.status().message();
  GgufWriter writer;
  for (const auto& [key, value] : (*in)->metadata()) {
    if (key != "general.alignment") writer.CopyValue(key, value);
  }
  for (const auto& [key, value] : f32_keys) writer.SetF32(key, value);
  for (const auto& [key, value] : i32_arrays) writer.SetI32Array(key, value);
  for (const GgufTensorInfo& info : (*in)->tensors()) {
    const void* data = info.data;
    const size_t bytes = info.desc.bytes();
    writer.AddTensor(info.name, info.desc,
                     [data, bytes](void* dst) { std::memcpy(dst, data, bytes); });
  }
  const std::string path = Scratch(name + ".gguf");
  const Status status = writer.Write(path);
  EXPECT_TRUE(status.ok()) << status.message();
  return path;
}

// A copy of the `arch`-hf folder whose config.json has `patch` merged into it (files linked).
std::string RewriteHf(const std::string& arch, const std::string& name,
                      const nlohmann::json& patch) {
  namespace fs = std::filesystem;
  const fs::path source = ModelDir() + arch + "-hf";
  const fs::path folder = Scratch(name);
  fs::remove_all(folder);
  fs::create_directories(folder);
  for (const fs::directory_entry& entry : fs::directory_iterator(source)) {
    if (entry.path().filename() != "config.json") {
      fs::create_symlink(fs::absolute(entry.path()), folder / entry.path().filename());
    }
  }
  std::ifstream in(source / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config.merge_patch(patch);
  std::ofstream(folder / "config.json") << config.dump(2);
  return folder.string();
}

// The ablated model misses the golden logits by the README's figure (`ablation_max_abs_change`,
// float64 vs float64) to within what F32 computation moves it.
void ExpectAblation(const std::string& arch, const std::string& path, const char* ablation,
                    std::function<void(ModelConfig&)> edit = nullptr) {
  const double figure = Entry(arch)["ablation_max_abs_change"][ablation].get<double>();
  const auto stats = RunAgainstGolden(arch, path, "", std::move(edit));
  EXPECT_FALSE(testing::Within(stats, testing::kF32Tolerance)) << ablation;
  EXPECT_NEAR(stats.max_abs, figure, 0.01 * figure) << ablation << ": " << stats.ToString();
  std::printf("%s %s: %s (README %.4g)\n", arch.c_str(), ablation, stats.ToString().c_str(),
              figure);
}

TEST(Olmo2Features, NormsBeforeTheSublayersInsteadOfAfter) {
  // The same two norm weights per block, on the sublayers' inputs (Llama's wiring).
  const auto pre_norm = [](ModelConfig& c) { c.norms_after_sublayers = false; };
  ExpectAblation("olmo2", ModelDir() + "olmo2.gguf", "pre_norm_instead", pre_norm);
  ExpectAblation("olmo2", ModelDir() + "olmo2-hf", "pre_norm_instead", pre_norm);
}

TEST(GraniteFeatures, EachMultiplierMatters) {
  struct Case {
    const char* ablation;
    const char* gguf_key;
    float gguf_value;
    const char* hf_field;
  };
  // Each multiplier at its neutral value; the attention scale at head_dim^-0.5 = 0.25.
  const Case cases[] = {
      {"no_embedding_multiplier", "granite.embedding_scale", 1.0f, "embedding_multiplier"},
      {"no_residual_multiplier", "granite.residual_scale", 1.0f, "residual_multiplier"},
      {"default_attention_scale", "granite.attention.scale", 0.25f, "attention_multiplier"},
      {"no_logits_scaling", "granite.logit_scale", 1.0f, "logits_scaling"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.ablation);
    ExpectAblation("granite", RewriteGguf("granite", c.ablation, {{c.gguf_key, c.gguf_value}}),
                   c.ablation);
    ExpectAblation("granite",
                   RewriteHf("granite", c.ablation, {{c.hf_field, double(c.gguf_value)}}),
                   c.ablation);
  }
}

TEST(SmolLm3Features, NopeLayersMatter) {
  // RoPE on every layer: HF's list, petrel's GGUF key, and the config edited.
  ExpectAblation("smollm3",
                 RewriteHf("smollm3", "rope_everywhere", {{"no_rope_layers", {1, 1, 1, 1}}}),
                 "nope_ignored");
  ExpectAblation(
      "smollm3",
      RewriteGguf("smollm3", "rope_everywhere", {}, {{"smollm3.no_rope_layers", {1, 1, 1, 1}}}),
      "nope_ignored");
  ExpectAblation("smollm3", ModelDir() + "smollm3.gguf", "nope_ignored",
                 [](ModelConfig& c) { c.nope_layers.clear(); });
  // NoPE on layer 0 instead of 3 (the every-4th rule counted from 0).
  ExpectAblation("smollm3",
                 RewriteHf("smollm3", "nope_shifted", {{"no_rope_layers", {0, 1, 1, 1}}}),
                 "nope_shifted");
  // The interval alone gives the same layers as the list: without the list, every 4th.
  nlohmann::json no_list = {{"no_rope_layers", nullptr}, {"no_rope_layer_interval", 4}};
  const auto stats = RunAgainstGolden("smollm3", RewriteHf("smollm3", "interval_only", no_list));
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
}

// A non-default NoPE list survives conversion to GGUF in petrel's key (llama.cpp would assume
// every 4th layer): the converted file gives the ablated folder's logits.
TEST(SmolLm3Features, NopeListTravelsThroughConversion) {
  const std::string folder =
      RewriteHf("smollm3", "nope_shifted_convert", {{"no_rope_layers", {0, 1, 1, 1}}});
  const std::string out = Scratch("nope_shifted.gguf");
  const auto mix = ParseQuantMix("F32");
  ASSERT_TRUE(mix.has_value());
  ASSERT_TRUE(QuantizeHfFolder(folder, out, *mix, false).ok());
  auto from_hf = LoadEngine(folder, /*tokenizer=*/false);
  auto from_gguf = LoadEngine(out, /*tokenizer=*/false);
  ASSERT_TRUE(from_hf && from_gguf);
  const auto ids = Entry("smollm3")["ids"].get<std::vector<int32_t>>();
  const auto stats = testing::CompareLogits(Logits(*from_gguf, ids), Logits(*from_hf, ids), 2048);
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
  EXPECT_EQ(from_gguf->config().nope_layers, (std::vector<uint8_t>{1, 0, 0, 0}));
  std::remove(out.c_str());
}

}  // namespace
}  // namespace petrel
