// gpt-oss from ../shared/models/synth-arch2 (GGUF as llama.cpp's converter writes it, and the HF
// folder) against the float64 reference of the golden README ("synth-arch2", F32 row: max abs
// <= 1e-3, rel RMS <= 1e-5, top-1 48/48, greedy ids exactly `greedy.new_ids` through single-token
// decode steps past every window). Then one test per feature showing that it matters: without
// sinks, without the window, with llama.cpp's rounded YaRN range, without the SwiGLU clamp, the
// logits move by the README's ablation figures (and the rounded range gives its
// `gpt-oss.yarn-truncated.f32`).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/convert/quantize_hf.h"
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
std::string Scratch(const std::string& name) { return testing::ScratchDir() + "/gpt_oss_" + name; }

const nlohmann::json& Entry() {
  static const nlohmann::json parity = testing::ReadJson(GoldenDir() + "parity.json");
  return parity["gpt-oss"];
}

std::unique_ptr<Engine> LoadEngine(const std::string& path, bool tokenizer,
                                   const std::string& device = "") {
  EngineOptions options;
  if (!device.empty()) {
    options.device = device;
    options.device_layers = 1000;
  }
  options.n_threads = 2;
  options.context = 256;
  options.load_tokenizer = tokenizer;
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

std::vector<int32_t> Ids() { return Entry()["ids"].get<std::vector<int32_t>>(); }

std::vector<float> Golden(const std::string& file) {
  return testing::ReadF32File(GoldenDir() + file);
}

testing::LogitStats RunAgainst(const std::string& path, const std::vector<float>& want,
                               const std::string& device = "") {
  auto engine = LoadEngine(path, /*tokenizer=*/false, device);
  if (!engine) return {INFINITY, INFINITY, 0.0};
  return testing::CompareLogits(Logits(*engine, Ids()), want, 2048);
}

class GptOss : public ::testing::TestWithParam<bool> {
 protected:
  std::string Path() const { return ModelDir() + (GetParam() ? "gpt-oss-hf" : "gpt-oss.gguf"); }
};

TEST_P(GptOss, LogitsMatchTheReference) {
  const auto want = Golden(Entry()["logits"].get<std::string>());
  for (const std::string device : {"", "ref"}) {
    const auto stats = RunAgainst(Path(), want, device);
    EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance))
        << Path() << " on " << (device.empty() ? "cpu" : device) << ": " << stats.ToString();
    std::printf("%s on %s: %s\n", Path().c_str(), device.empty() ? "cpu" : device.c_str(),
                stats.ToString().c_str());
  }
}

// 8 prompt tokens in one batch, then 32 single-token steps: positions up to 40, past the
// 16-token window of the even layers.
TEST_P(GptOss, GreedyContinuationMatches) {
  auto engine = LoadEngine(Path(), /*tokenizer=*/true);
  ASSERT_TRUE(engine);
  const nlohmann::json& greedy = Entry()["greedy"];
  const auto prompt = greedy["prompt_ids"].get<std::vector<int32_t>>();
  const auto want = greedy["new_ids"].get<std::vector<int32_t>>();
  GenerateOptions options;
  options.max_new_tokens = want.size();
  options.sampling.temperature = 0.0f;
  options.ignore_eos = true;
  const SeqId seq = engine->NewSequence();
  auto result = Generate(*engine, seq, prompt, options, nullptr);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->new_ids, want) << Path();
}

INSTANTIATE_TEST_SUITE_P(Sources, GptOss, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "hf" : "gguf"; });

// The HF folder through `petrel quantize` (F32): the GGUF it writes reads back to the same
// logits (YaRN's unrounded range and the SwiGLU limit travel in petrel's keys).
TEST(GptOssConvert, HfFolderToGgufKeepsParity) {
  const std::string out = Scratch("converted.gguf");
  const auto mix = ParseQuantMix("F32");
  ASSERT_TRUE(mix.has_value());
  const Status written = QuantizeHfFolder(ModelDir() + "gpt-oss-hf", out, *mix, false);
  ASSERT_TRUE(written.ok()) << written.message();
  const auto stats = RunAgainst(out, Golden(Entry()["logits"].get<std::string>()));
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
  std::remove(out.c_str());
}

// --- Each feature matters -----------------------------------------------------------------

// A copy of the GGUF with some metadata keys set and some tensors' values replaced.
std::string RewriteGguf(const std::string& name, const std::map<std::string, uint32_t>& u32_keys,
                        const std::map<std::string, float>& tensor_fill) {
  auto in = GgufFile::Open(ModelDir() + "gpt-oss.gguf");
  EXPECT_TRUE(in.ok()) << in.status().message();
  GgufWriter writer;
  for (const auto& [key, value] : (*in)->metadata()) {
    if (key != "general.alignment") writer.CopyValue(key, value);
  }
  for (const auto& [key, value] : u32_keys) writer.SetU32(key, value);
  for (const GgufTensorInfo& info : (*in)->tensors()) {
    const void* data = info.data;
    const size_t bytes = info.desc.bytes();
    std::optional<float> fill;
    for (const auto& [suffix, value] : tensor_fill) {
      if (info.name.size() >= suffix.size() &&
          info.name.compare(info.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        fill = value;
      }
    }
    writer.AddTensor(info.name, info.desc, [data, bytes, fill](void* dst) {
      if (!fill) {
        std::memcpy(dst, data, bytes);
        return;
      }
      for (size_t i = 0; i < bytes / sizeof(float); ++i) static_cast<float*>(dst)[i] = *fill;
    });
  }
  const std::string path = Scratch(name + ".gguf");
  const Status status = writer.Write(path);
  EXPECT_TRUE(status.ok()) << status.message();
  return path;
}

// A copy of the HF folder whose config.json has `patch` merged into it (weights linked).
std::string RewriteHf(const std::string& name, const nlohmann::json& patch) {
  namespace fs = std::filesystem;
  const fs::path source = ModelDir() + "gpt-oss-hf";
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
void ExpectAblation(const std::string& path, const char* ablation) {
  const double figure = Entry()["ablation_max_abs_change"][ablation].get<double>();
  const auto stats = RunAgainst(path, Golden(Entry()["logits"].get<std::string>()));
  EXPECT_FALSE(testing::Within(stats, testing::kF32Tolerance)) << ablation;
  EXPECT_NEAR(stats.max_abs, figure, 0.01 * figure) << ablation << ": " << stats.ToString();
  std::printf("%s: %s (README %.4g)\n", ablation, stats.ToString().c_str(), figure);
}

TEST(GptOssFeatures, WithoutSinks) {
  // A sink of -inf adds exp(-inf) = 0 to the denominator: no sink.
  ExpectAblation(RewriteGguf("no_sinks", {}, {{"attn_sinks.weight", -INFINITY}}), "no_sinks");
}

TEST(GptOssFeatures, WithoutTheWindow) {
  ExpectAblation(RewriteGguf("no_window", {{"gpt-oss.attention.sliding_window", 1u << 30}}, {}),
                 "no_window");
  ExpectAblation(RewriteHf("no_window", {{"layer_types", {"full_attention", "full_attention",
                                                          "full_attention", "full_attention"}}}),
                 "no_window");
}

TEST(GptOssFeatures, RoundedYarnRangeIsLlamaCppsNotTheReference) {
  const std::string truncated = RewriteHf("yarn_truncated", {{"rope_scaling", {{"truncate", true}}}});
  // With the range rounded, the logits are the README's llama.cpp-style ones...
  const auto stats = RunAgainst(truncated, Golden(Entry()["logits_yarn_truncated"].get<std::string>()));
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
  // ...and miss the golden by its ablation figure.
  ExpectAblation(truncated, "yarn_truncate");
  // The GGUF has no key for it; petrel's own key asks for the rounded range.
  auto in = GgufFile::Open(ModelDir() + "gpt-oss.gguf");
  ASSERT_TRUE(in.ok());
  GgufWriter writer;
  for (const auto& [key, value] : (*in)->metadata()) {
    if (key != "general.alignment") writer.CopyValue(key, value);
  }
  writer.SetBool("gpt-oss.rope.scaling.yarn_truncate", true);
  for (const GgufTensorInfo& info : (*in)->tensors()) {
    const void* data = info.data;
    const size_t bytes = info.desc.bytes();
    writer.AddTensor(info.name, info.desc,
                     [data, bytes](void* dst) { std::memcpy(dst, data, bytes); });
  }
  const std::string gguf = Scratch("yarn_truncated.gguf");
  ASSERT_TRUE(writer.Write(gguf).ok());
  const auto gguf_stats =
      RunAgainst(gguf, Golden(Entry()["logits_yarn_truncated"].get<std::string>()));
  EXPECT_TRUE(testing::Within(gguf_stats, testing::kF32Tolerance)) << gguf_stats.ToString();
}

TEST(GptOssFeatures, WithoutYarn) {
  ExpectAblation(RewriteHf("no_yarn", {{"rope_scaling", nullptr}}), "no_yarn");
  ExpectAblation(RewriteHf("no_mscale", {{"rope_scaling", {{"attention_factor", 1.0}}}}),
                 "no_yarn_mscale");
}

TEST(GptOssFeatures, WithoutTheSwigluClamp) {
  // A limit no pre-activation reaches is no clamp.
  ExpectAblation(RewriteHf("no_clamp", {{"swiglu_limit", 1e30}}), "no_swiglu_clamp");
}

TEST(GptOssFeatures, WithoutBiases) {
  ExpectAblation(RewriteGguf("no_router_bias", {}, {{"ffn_gate_inp.bias", 0.0f}}),
                 "no_router_bias");
  ExpectAblation(RewriteGguf("no_expert_bias", {},
                             {{"ffn_gate_exps.bias", 0.0f},
                              {"ffn_up_exps.bias", 0.0f},
                              {"ffn_down_exps.bias", 0.0f}}),
                 "no_expert_bias");
}

}  // namespace
}  // namespace petrel
