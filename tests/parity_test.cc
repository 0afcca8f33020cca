// Parity with ../shared/golden: logits at every position and greedy continuations, from the
// Hugging Face folder and the GGUF conversions of the story model, and the synth-tiny files.
#include <gtest/gtest.h>

#include <cstring>

#include "core/runtime/engine.h"
#include "core/generation/generate.h"
#include "cpu/matmul/bf16_dot.h"  // Bf16DotSupported
#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::CompareLogits;
using testing::ReadF32File;
using testing::SharedDir;

std::string StoryHf() { return SharedDir() + "/models/story"; }
std::string StoryGguf(const char* type) { return SharedDir() + "/models/story-gguf/story-" + std::string(type) + ".gguf"; }
std::string Golden(const std::string& rel) { return SharedDir() + "/golden/" + rel; }

std::unique_ptr<Engine> LoadOrDie(const std::string& path, EngineOptions options = {}) {
  if (options.n_threads == 0) options.n_threads = 2;
  if (options.context == 0) options.context = 512;
  auto engine = Engine::Load(path, options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

std::vector<float> AllLogits(Engine& engine, const std::vector<int32_t>& ids) {
  const SeqId seq = engine.NewSequence();
  std::vector<float> logits;
  Status status = engine.Prefill(seq, ids, /*all_logits=*/true, &logits);
  EXPECT_TRUE(status.ok()) << status.message();
  engine.FreeSequence(seq);
  return logits;
}

// Logits need no tokenizer: load without one so these tests isolate the forward pass.
EngineOptions NoTokenizer() {
  EngineOptions options;
  options.load_tokenizer = false;
  return options;
}

void CheckStoryLogits(const std::string& model, const testing::Tolerance& tolerance,
                      EngineOptions options = NoTokenizer()) {
  auto engine = LoadOrDie(model, options);
  ASSERT_TRUE(engine);
  const nlohmann::json cases = testing::ReadJson(Golden("story/logits.json"));
  ASSERT_TRUE(cases.is_array());
  for (const auto& entry : cases) {
    const std::vector<int32_t> ids = entry["ids"].get<std::vector<int32_t>>();
    const std::vector<float> want = ReadF32File(Golden("story/" + entry["file"].get<std::string>()));
    const auto stats = CompareLogits(AllLogits(*engine, ids), want, 2048);
    EXPECT_TRUE(testing::Within(stats, tolerance)) << model << " " << entry["name"] << ": " << stats.ToString();
    std::printf("%s %s: %s\n", model.c_str(), entry["name"].get<std::string>().c_str(), stats.ToString().c_str());
  }
}

TEST(StoryParity, HuggingFaceFolderLogits) { CheckStoryLogits(StoryHf(), testing::kF32Tolerance); }
TEST(StoryParity, GgufF32Logits) { CheckStoryLogits(StoryGguf("f32"), testing::kF32Tolerance); }
TEST(StoryParity, GgufF16Logits) { CheckStoryLogits(StoryGguf("f16"), testing::kF16Tolerance); }
TEST(StoryParity, GgufF32LogitsWithF16Cache) {
  // The golden README's F16 KV row.
  EngineOptions options = NoTokenizer();
  options.kv_type = DType::kF16;
  auto engine = LoadOrDie(StoryGguf("f32"), options);
  ASSERT_TRUE(engine);
  const std::vector<float> want = ReadF32File(Golden("story/logits_len200.f32"));
  const nlohmann::json cases = testing::ReadJson(Golden("story/logits.json"));
  const auto ids = cases[3]["ids"].get<std::vector<int32_t>>();
  const auto stats = CompareLogits(AllLogits(*engine, ids), want, 2048);
  EXPECT_TRUE(testing::Within(stats, testing::kF16Tolerance)) << stats.ToString();
  std::printf("story-f32.gguf len200 with f16 KV cache: %s\n", stats.ToString().c_str());
}

void CheckGreedy(const std::string& model) {
  auto engine = LoadOrDie(model);
  ASSERT_TRUE(engine);
  for (const auto& line : testing::ReadJsonLines(Golden("story/greedy.jsonl"))) {
    const auto prompt_ids = line["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = line["new_ids"].get<std::vector<int32_t>>();
    GenerateOptions options;
    options.max_new_tokens = 64;
    options.sampling.temperature = 0.0f;
    const SeqId seq = engine->NewSequence();
    auto result = Generate(*engine, seq, prompt_ids, options, nullptr);
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_EQ(result->new_ids, want) << model << " prompt: " << line["prompt"];
    engine->FreeSequence(seq);
  }
}

TEST(StoryParity, GreedyFromHuggingFaceFolder) { CheckGreedy(StoryHf()); }
TEST(StoryParity, GreedyFromGgufF32) { CheckGreedy(StoryGguf("f32")); }

class SynthTinyParity : public ::testing::TestWithParam<std::pair<const char*, testing::Tolerance>> {};

TEST_P(SynthTinyParity, LogitsWithinTolerance) {
  const auto [type, tolerance] = GetParam();
  std::string lower = type;
  for (char& c : lower) c = char(std::tolower(c));
  auto engine = LoadOrDie(SharedDir() + "/models/synth-tiny/tiny-v2048-" + lower + ".gguf", NoTokenizer());
  ASSERT_TRUE(engine);
  const nlohmann::json parity = testing::ReadJson(Golden("synth-tiny/parity.json"));
  const auto ids = parity["tiny_v2048"]["ids"].get<std::vector<int32_t>>();
  const auto want = ReadF32File(Golden("synth-tiny/" + std::string(type) + ".f32"));
  const auto stats = CompareLogits(AllLogits(*engine, ids), want, 2048);
  EXPECT_TRUE(testing::Within(stats, tolerance)) << type << ": " << stats.ToString();
  std::printf("synth-tiny %s: %s\n", type, stats.ToString().c_str());
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, SynthTinyParity,
                         ::testing::Values(std::make_pair("F32", testing::kF32Tolerance),
                                           std::make_pair("F16", testing::kF16Tolerance),
                                           std::make_pair("BF16", testing::kBF16Tolerance)),
                         [](const auto& info) { return std::string(info.param.first); });

// `--bf16-dot off`: BF16 weights widened to f32 (the default, `auto`, runs them on `vdpbf16ps`
// where the CPU has it, which SynthTinyParity's BF16 case then checks).
TEST(SynthTinyParityBf16Off, LogitsWithinTolerance) {
  EngineOptions options = NoTokenizer();
  options.bf16_dot = Bf16Dot::kOff;
  auto engine = LoadOrDie(SharedDir() + "/models/synth-tiny/tiny-v2048-bf16.gguf", options);
  ASSERT_TRUE(engine);
  const nlohmann::json parity = testing::ReadJson(Golden("synth-tiny/parity.json"));
  const auto ids = parity["tiny_v2048"]["ids"].get<std::vector<int32_t>>();
  const auto want = ReadF32File(Golden("synth-tiny/BF16.f32"));
  const auto stats = CompareLogits(AllLogits(*engine, ids), want, 2048);
  EXPECT_TRUE(testing::Within(stats, testing::kBF16Tolerance)) << stats.ToString();
}

// `--bf16-dot on`: F16 and BF16 weights multiplied with `vdpbf16ps` on activations rounded to
// bfloat16 (and F16 weights rounded too), in prompts and decode steps alike. The golden files'
// row for that arithmetic is "BF16, activations rounded to bf16" (README section 4).
EngineOptions Bf16DotOn() {
  EngineOptions options = NoTokenizer();
  options.bf16_dot = Bf16Dot::kAll;
  return options;
}

std::string SynthTinyFile(const char* type) {
  std::string lower = type;
  for (char& c : lower) c = char(std::tolower(c));
  return SharedDir() + "/models/synth-tiny/tiny-v2048-" + lower + ".gguf";
}

class Bf16DotParity : public ::testing::TestWithParam<const char*> {};

TEST_P(Bf16DotParity, SynthTinyLogitsWithinTheBf16Row) {
  if (!cpu::Bf16DotSupported()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  const char* type = GetParam();
  auto engine = LoadOrDie(SynthTinyFile(type), Bf16DotOn());
  ASSERT_TRUE(engine);
  const nlohmann::json parity = testing::ReadJson(Golden("synth-tiny/parity.json"));
  const auto ids = parity["tiny_v2048"]["ids"].get<std::vector<int32_t>>();
  const auto want = ReadF32File(Golden("synth-tiny/" + std::string(type) + ".f32"));
  const auto stats = CompareLogits(AllLogits(*engine, ids), want, 2048);
  EXPECT_TRUE(testing::Within(stats, testing::kBF16Tolerance)) << type << ": " << stats.ToString();
  std::printf("synth-tiny %s, bf16 dot: %s\n", type, stats.ToString().c_str());
}

// A prompt's rows and the same tokens fed one decode step at a time: the same bits (the decode
// steps take the single-token path, the prompt the panels).
TEST_P(Bf16DotParity, PromptRowsMatchDecodeSteps) {
  if (!cpu::Bf16DotSupported()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  auto engine = LoadOrDie(SynthTinyFile(GetParam()), Bf16DotOn());
  ASSERT_TRUE(engine);
  const nlohmann::json parity = testing::ReadJson(Golden("synth-tiny/parity.json"));
  const auto ids = parity["tiny_v2048"]["ids"].get<std::vector<int32_t>>();
  const std::vector<float> prompt = AllLogits(*engine, ids);
  ASSERT_EQ(prompt.size(), ids.size() * 2048);
  const SeqId seq = engine->NewSequence();
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<float> step;
    ASSERT_TRUE(engine->Prefill(seq, {ids[i]}, /*all_logits=*/false, &step).ok());
    ASSERT_EQ(step.size(), size_t{2048});
    ASSERT_EQ(0, std::memcmp(step.data(), prompt.data() + i * 2048, 2048 * sizeof(float)))
        << "position " << i;
  }
  engine->FreeSequence(seq);
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, Bf16DotParity, ::testing::Values("F16", "BF16"),
                         [](const auto& info) { return std::string(info.param); });

TEST(Bf16DotStoryParity, GgufF16LogitsWithinTheBf16Row) {
  if (!cpu::Bf16DotSupported()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  CheckStoryLogits(StoryGguf("f16"), testing::kBF16Tolerance, Bf16DotOn());
}

}  // namespace
}  // namespace petrel
