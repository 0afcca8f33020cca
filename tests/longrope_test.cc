// LongRoPE (Phi-3/3.5 long-context models): a Phi-3 folder of ../shared/models/synth-arch with
// `rope_scaling` of type "longrope" loads, its rotation frequencies are base^(-2i/d) divided by
// the short or long factor (chosen by the engine's context against
// original_max_position_embeddings) and its attention factor is sqrt(1 + ln(s) / ln(original)),
// all computed here independently; the GGUF form (rope_factors_long/short tensors) reads the
// same, conversion writes it, and an unknown scaling type is a one-line error naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/convert/quantize_hf.h"
#include "core/convert/quantize_model.h"
#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/model/loader.h"
#include "core/runtime/engine.h"
#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::SharedDir;

std::string Phi3Folder() { return SharedDir() + "/models/synth-arch/phi3-hf"; }
std::string Scratch(const std::string& name) { return testing::ScratchDir() + "/longrope_" + name; }

// The fixture: head_dim 32, all of it rotated (16 pairs), base 1e4.
constexpr int kPairs = 16;
constexpr double kBase = 10000.0;
constexpr int64_t kOriginal = 256;
constexpr int64_t kMaxPositions = 8192;  // a stretch of 32

std::vector<double> Factors(double first, double step) {
  std::vector<double> f;
  for (int i = 0; i < kPairs; ++i) f.push_back(first + step * i);
  return f;
}
const std::vector<double> kLong = Factors(1.0, 2.5);    // 1 .. 38.5
const std::vector<double> kShort = Factors(1.0, 0.05);  // 1 .. 1.75

// The Phi-3 folder with `patch` merged into config.json (other files linked).
std::string Folder(const std::string& name, const nlohmann::json& patch) {
  namespace fs = std::filesystem;
  const fs::path folder = Scratch(name);
  fs::remove_all(folder);
  fs::create_directories(folder);
  for (const fs::directory_entry& entry : fs::directory_iterator(Phi3Folder())) {
    if (entry.path().filename() != "config.json") {
      fs::create_symlink(fs::absolute(entry.path()), folder / entry.path().filename());
    }
  }
  nlohmann::json config = testing::ReadJson(Phi3Folder() + "/config.json");
  config.merge_patch(patch);
  std::ofstream(folder / "config.json") << config.dump(2);
  return folder.string();
}

nlohmann::json LongRopePatch(const std::string& type = "longrope") {
  return {{"max_position_embeddings", kMaxPositions},
          {"original_max_position_embeddings", kOriginal},
          {"rope_scaling", {{"type", type}, {"long_factor", kLong}, {"short_factor", kShort}}}};
}

// base^(-2i/d) / factor_i, in double as the paper writes it.
void ExpectFrequencies(const std::vector<double>& got, const std::vector<double>& factors,
                       const char* which) {
  ASSERT_EQ(got.size(), size_t(kPairs)) << which;
  for (int i = 0; i < kPairs; ++i) {
    const double want = 1.0 / (factors[size_t(i)] * std::pow(kBase, 2.0 * i / (2.0 * kPairs)));
    EXPECT_NEAR(got[size_t(i)], want, 1e-7 * want) << which << " pair " << i;
  }
}

// sqrt(1 + ln(32) / ln(256)).
const double kAttentionFactor =
    std::sqrt(1.0 + std::log(double(kMaxPositions) / kOriginal) / std::log(double(kOriginal)));

std::unique_ptr<Engine> LoadEngine(const std::string& path, size_t context) {
  EngineOptions options;
  options.n_threads = 2;
  options.context = context;
  options.load_tokenizer = false;
  auto engine = Engine::Load(path, options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

std::vector<float> Logits(Engine& engine) {
  const std::vector<int32_t> ids = {1, 2005, 2000, 2023, 780, 353, 1891, 217, 538, 286, 655};
  const SeqId seq = engine.NewSequence();
  std::vector<float> logits;
  EXPECT_TRUE(engine.Prefill(seq, ids, /*all_logits=*/true, &logits).ok());
  engine.FreeSequence(seq);
  return logits;
}

TEST(LongRope, HfConfigGivesTheFormulasFrequenciesAndAttentionFactor) {
  for (const std::string type : {"longrope", "su"}) {
    SCOPED_TRACE(type);
    const std::string folder = Folder("hf_" + type, LongRopePatch(type));
    LoadOptions options;
    options.load_tokenizer = false;
    auto model = LoadModel(folder, options);
    ASSERT_TRUE(model.ok()) << model.status().message();
    const RopeConfig& rope = (*model)->config.rope;
    EXPECT_EQ(rope.scaling, RopeScalingKind::kLongRope);
    EXPECT_EQ(rope.original_context, kOriginal);
    EXPECT_NEAR(rope.attn_factor, kAttentionFactor, 1e-6);
    // Loaded alone, the model is sized for its trained context, past the original: long.
    ExpectFrequencies((*model)->weights.rope_inv_freq, kLong, "load");
    EXPECT_NE((*model)->config.Summary().find("longrope         original context 256, long"),
              std::string::npos)
        << (*model)->config.Summary();
  }
  // An engine whose context fits the original uses the short table; a longer one the long.
  const std::string folder = Folder("hf_engine", LongRopePatch());
  auto short_engine = LoadEngine(folder, 256);
  auto long_engine = LoadEngine(folder, 257);
  ASSERT_TRUE(short_engine && long_engine);
  ExpectFrequencies(short_engine->placed_weights().rope_inv_freq, kShort, "context 256");
  ExpectFrequencies(long_engine->placed_weights().rope_inv_freq, kLong, "context 257");
  EXPECT_NE(Logits(*short_engine), Logits(*long_engine));
}

// Independent of the frequencies' arithmetic: LongRoPE with every short factor 1 and attention
// factor 1 is the unscaled model (the golden logits), and with every factor 2 it is linear
// scaling by 2, exactly.
TEST(LongRope, EquivalentToPlainAndLinearRope) {
  const auto golden = testing::ReadF32File(SharedDir() + "/golden/synth-arch/phi3.f32");
  const nlohmann::json parity = testing::ReadJson(SharedDir() + "/golden/synth-arch/parity.json");
  const auto ids = parity["phi3"]["ids"].get<std::vector<int32_t>>();
  auto ones = LongRopePatch();
  ones["rope_scaling"]["short_factor"] = std::vector<double>(kPairs, 1.0);
  ones["rope_scaling"]["attention_factor"] = 1.0;
  auto engine = LoadEngine(Folder("ones", ones), 256);
  ASSERT_TRUE(engine);
  const SeqId seq = engine->NewSequence();
  std::vector<float> logits;
  ASSERT_TRUE(engine->Prefill(seq, ids, /*all_logits=*/true, &logits).ok());
  const auto stats = testing::CompareLogits(logits, golden, 2048);
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();

  auto twos = LongRopePatch();
  twos["rope_scaling"]["short_factor"] = std::vector<double>(kPairs, 2.0);
  twos["rope_scaling"]["attention_factor"] = 1.0;
  auto linear = Folder("linear", {{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}});
  auto a = LoadEngine(Folder("twos", twos), 256);
  auto b = LoadEngine(linear, 256);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(Logits(*a), Logits(*b));
  // The attention factor multiplies cos and sin: the default one moves the logits.
  auto scaled = twos;
  scaled["rope_scaling"].erase("attention_factor");
  auto c = LoadEngine(Folder("twos_scaled", scaled), 256);
  ASSERT_TRUE(c);
  EXPECT_NE(Logits(*a), Logits(*c));
}

// llama.cpp's GGUF form: the tables as tensors, the attention factor as a key, no scaling
// type. petrel's converter writes it from the folder; a GGUF written here by hand reads the
// same; both give the folder's logits.
TEST(LongRope, GgufFormFromConversionAndByHand) {
  const std::string folder = Folder("convert", LongRopePatch());
  const std::string converted = Scratch("converted.gguf");
  const auto mix = ParseQuantMix("F32");
  ASSERT_TRUE(mix.has_value());
  ASSERT_TRUE(QuantizeHfFolder(folder, converted, *mix, false).ok());
  {
    auto file = GgufFile::Open(converted);
    ASSERT_TRUE(file.ok());
    const GgufTensorInfo* table = (*file)->FindTensor("rope_factors_long.weight");
    ASSERT_NE(table, nullptr);
    EXPECT_EQ(table->desc.ne[0], kPairs);
    EXPECT_EQ(static_cast<const float*>(table->data)[3], float(kLong[3]));
    auto attn = (*file)->GetFloat("phi3.rope.scaling.attn_factor");
    ASSERT_TRUE(attn.ok());
    EXPECT_NEAR(*attn, kAttentionFactor, 1e-6);
  }
  // By hand: the fixture's GGUF with the tables, the original context and a trained context.
  auto in = GgufFile::Open(SharedDir() + "/models/synth-arch/phi3.gguf");
  ASSERT_TRUE(in.ok());
  GgufWriter writer;
  for (const auto& [key, value] : (*in)->metadata()) {
    if (key != "general.alignment") writer.CopyValue(key, value);
  }
  writer.SetU32("phi3.context_length", uint32_t(kMaxPositions));
  writer.SetU32("phi3.rope.scaling.original_context_length", uint32_t(kOriginal));
  for (const GgufTensorInfo& info : (*in)->tensors()) {
    const void* data = info.data;
    const size_t bytes = info.desc.bytes();
    writer.AddTensor(info.name, info.desc,
                     [data, bytes](void* dst) { std::memcpy(dst, data, bytes); });
  }
  for (const auto& [name, table] : {std::pair{"rope_factors_long.weight", &kLong},
                                    std::pair{"rope_factors_short.weight", &kShort}}) {
    std::vector<float> values(table->begin(), table->end());
    writer.AddTensor(name, TensorDesc::Make(DType::kF32, {kPairs}), [values](void* dst) {
      std::memcpy(dst, values.data(), values.size() * sizeof(float));
    });
  }
  const std::string by_hand = Scratch("by_hand.gguf");
  ASSERT_TRUE(writer.Write(by_hand).ok());
  LoadOptions options;
  options.load_tokenizer = false;
  auto model = LoadModel(by_hand, options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  // No attn_factor key: the formula, from context_length / original_context_length.
  EXPECT_NEAR((*model)->config.rope.attn_factor, kAttentionFactor, 1e-6);
  ExpectFrequencies((*model)->weights.rope_inv_freq, kLong, "gguf");

  for (const size_t context : {size_t(200), size_t(300)}) {
    auto from_hf = LoadEngine(folder, context);
    auto from_converted = LoadEngine(converted, context);
    auto from_hand = LoadEngine(by_hand, context);
    ASSERT_TRUE(from_hf && from_converted && from_hand);
    const auto want = Logits(*from_hf);
    for (Engine* engine : {from_converted.get(), from_hand.get()}) {
      const auto stats = testing::CompareLogits(Logits(*engine), want, 2048);
      EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance))
          << "context " << context << ": " << stats.ToString();
    }
  }
  std::remove(converted.c_str());
  std::remove(by_hand.c_str());
}

TEST(LongRope, UnknownScalingTypeIsOneLineNamingIt) {
  const std::string folder =
      Folder("unknown", {{"rope_scaling", {{"type", "longrope-v9"}, {"factor", 4.0}}}});
  LoadOptions options;
  options.load_tokenizer = false;
  auto model = LoadModel(folder, options);
  ASSERT_FALSE(model.ok());
  const std::string message = model.status().message();
  EXPECT_NE(message.find("rope_scaling type 'longrope-v9' is not supported"), std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

}  // namespace
}  // namespace petrel
