// DeepSeek2 (V3-style) end to end: ../shared/models/synth-arch2/deepseek2.gguf and
// deepseek2-hf against the float64 reference (golden README "synth-arch2": max abs <= 1e-3, rel
// RMS <= 1e-5, top-1 48/48) on the cpu and ref backends, greedy continuations through
// single-token decode steps, the latent-only KV cache's size, batch invariance of the absorbed
// attention, and ablations: a model with one DeepSeek feature changed must fail parity.
#include <gtest/gtest.h>

#include <cstdio>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/convert/quant_mix.h"
#include "core/convert/quantize_hf.h"
#include "core/format/gguf.h"
#include "core/generation/generate.h"
#include "core/runtime/backend_registry.h"
#include "core/model/loader.h"
#include "core/runtime/engine.h"
#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::SharedDir;

std::string ModelDir() { return SharedDir() + "/models/synth-arch2/"; }
std::string GoldenDir() { return SharedDir() + "/golden/synth-arch2/"; }

const nlohmann::json& Parity() {
  static const nlohmann::json parity = testing::ReadJson(GoldenDir() + "parity.json");
  return parity;
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
  const Status status = engine.Prefill(seq, ids, /*all_logits=*/true, &logits);
  EXPECT_TRUE(status.ok()) << status.message();
  engine.FreeSequence(seq);
  return logits;
}

std::vector<int32_t> Ids() { return Parity()["deepseek2"]["ids"].get<std::vector<int32_t>>(); }
std::vector<float> Golden() {
  return testing::ReadF32File(GoldenDir() + Parity()["deepseek2"]["logits"].get<std::string>());
}

class DeepSeek2 : public ::testing::TestWithParam<bool> {
 protected:
  std::string Path() const {
    return ModelDir() + (GetParam() ? "deepseek2-hf" : "deepseek2.gguf");
  }
};

TEST_P(DeepSeek2, LogitsMatchTheReference) {
  const auto want = Golden();
  ASSERT_EQ(want.size(), 48u * 2048u);
  for (const std::string device : {"", "ref"}) {
    auto engine = LoadEngine(Path(), /*tokenizer=*/false, device);
    ASSERT_TRUE(engine);
    const auto stats = testing::CompareLogits(Logits(*engine, Ids()), want, 2048);
    EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance))
        << Path() << " on " << (device.empty() ? "cpu" : device) << ": " << stats.ToString();
    std::printf("%s on %s: %s\n", Path().c_str(), device.empty() ? "cpu" : device.c_str(),
                stats.ToString().c_str());
  }
}

// The prompt in one batch, then one token per decode step, as the golden's greedy run.
TEST_P(DeepSeek2, GreedyContinuationMatchesTheReference) {
  auto engine = LoadEngine(Path(), /*tokenizer=*/true);
  ASSERT_TRUE(engine);
  const nlohmann::json& greedy = Parity()["deepseek2"]["greedy"];
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

// The cache keeps one latent row of kv_lora + rope per token and layer, no V rows:
// (32 + 8) x 3 layers x 4 bytes = 480 bytes per token at F32 (the golden README's figure).
TEST_P(DeepSeek2, KvCacheHoldsTheLatentOnly) {
  EngineOptions options;
  options.n_threads = 1;
  options.context = 256;
  options.load_tokenizer = false;
  options.kv_type = DType::kF32;
  auto engine = Engine::Load(Path(), options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  const ModelConfig& c = (*engine)->model().config;
  EXPECT_TRUE(c.mla());
  EXPECT_EQ(c.kv_row_elems(), 40);
  EXPECT_FALSE((*engine)->kv_has_values());
  EXPECT_EQ((*engine)->kv_row_bytes() * (*engine)->kv_layers(), 480u);
}

// Each position's logits decoded one token at a time equal the prompt's, bit for bit: the
// absorbed attention is the same computation whatever the batch.
TEST_P(DeepSeek2, DecodeStepsEqualThePrompt) {
  auto engine = LoadEngine(Path(), /*tokenizer=*/false);
  ASSERT_TRUE(engine);
  std::vector<int32_t> ids = Ids();
  ids.resize(20);
  const auto prompt = Logits(*engine, ids);
  const SeqId seq = engine->NewSequence();
  std::vector<float> step;
  for (size_t t = 0; t < ids.size(); ++t) {
    ASSERT_TRUE(engine->Prefill(seq, {ids[t]}, /*all_logits=*/true, &step).ok());
    ASSERT_EQ(std::memcmp(step.data(), prompt.data() + t * 2048, 2048 * sizeof(float)), 0)
        << "position " << t;
  }
}

// `petrel quantize` of the HF folder writes llama.cpp's layout: kv_b_proj split into attn_k_b
// (transposed per head) and attn_v_b, the deepseek2 keys; the file gives the same logits.
TEST(DeepSeek2Convert, HfFolderToGguf) {
  const std::string out = testing::ScratchDir() + "/deepseek2_converted.gguf";
  const auto mix = ParseQuantMix("F32");
  ASSERT_TRUE(mix.has_value());
  const Status written = QuantizeHfFolder(ModelDir() + "deepseek2-hf", out, *mix, false);
  ASSERT_TRUE(written.ok()) << written.message();
  auto file = GgufFile::Open(out);
  ASSERT_TRUE(file.ok());
  const GgufTensorInfo* k_b = (*file)->FindTensor("blk.0.attn_k_b.weight");
  ASSERT_NE(k_b, nullptr);
  EXPECT_EQ(k_b->desc.ShapeString(), "[16, 32, 4]");
  EXPECT_EQ((*file)->FindTensor("blk.0.attn_kv_b.weight"), nullptr);
  EXPECT_EQ(*(*file)->GetUint("deepseek2.attention.key_length_mla"), 24u);
  auto engine = LoadEngine(out, false);
  ASSERT_TRUE(engine);
  const auto stats = testing::CompareLogits(Logits(*engine, Ids()), Golden(), 2048);
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
  std::remove(out.c_str());
}

// A device that, like the Vulkan and CUDA backends, does not claim mla_attention (nor, here,
// moe_ffn): every DeepSeek2 block stays on the CPU (placement says why), the head may go to the
// device, and the logits are the all-CPU ones.
class NoLatentBackend final : public Backend {
 public:
  explicit NoLatentBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const char* Name() const override { return "ref-no-latent"; }
  BackendId id() const override { return inner_->id(); }
  bool Supports(const Node& node) const override {
    return node.op != OpKind::kMlaAttention && node.op != OpKind::kMoeFfn && inner_->Supports(node);
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
    if (!Supports(node)) return Error("%s placed on a backend without it", OpName(node.op));
    return inner_->Run(node, values, kv);
  }
  Status Submit() override { return inner_->Submit(); }

 private:
  std::unique_ptr<Backend> inner_;
};

TEST(DeepSeek2Placement, LayersADeviceCannotRunStayOnTheCpu) {
  static const Status registered = RegisterBackend(
      {"ref-no-latent", [](BackendId id, const BackendOptions& options) -> Result<std::unique_ptr<Backend>> {
         PETREL_ASSIGN_OR_RETURN(std::unique_ptr<Backend> ref, CreateBackend("ref", id, options));
         return std::unique_ptr<Backend>(std::make_unique<NoLatentBackend>(std::move(ref)));
       },
       nullptr});
  ASSERT_TRUE(registered.ok()) << registered.message();
  auto cpu = LoadEngine(ModelDir() + "deepseek2.gguf", false);
  auto limited = LoadEngine(ModelDir() + "deepseek2.gguf", false, "ref-no-latent");
  ASSERT_TRUE(cpu && limited);
  const std::string placement = limited->PlacementString();
  EXPECT_NE(placement.find("layer 0 on cpu: ref-no-latent does not run mla_attention"),
            std::string::npos) << placement;
  EXPECT_NE(placement.find("output: ref-no-latent"), std::string::npos) << placement;
  const auto stats = testing::CompareLogits(Logits(*limited, Ids()), Logits(*cpu, Ids()), 2048);
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
  std::printf("placement: %s\n", placement.c_str());
}

INSTANTIATE_TEST_SUITE_P(Sources, DeepSeek2, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "hf" : "gguf"; });

// The features matter: each change below is one of the golden README's ablations, applied to
// the loaded model; the logits must then fail the F32 tolerance by far.
struct Ablation {
  const char* name;
  void (*apply)(ModelConfig& config, ModelWeights& weights);
};

TEST(DeepSeek2Features, EachAblationFailsParity) {
  const Ablation ablations[] = {
      {"softmax instead of sigmoid routing",
       [](ModelConfig& c, ModelWeights&) { c.expert_gating = MoeGating::kSoftmax; }},
      {"no routed scaling factor", [](ModelConfig& c, ModelWeights&) { c.expert_weights_scale = 1; }},
      {"no renormalisation", [](ModelConfig& c, ModelWeights&) { c.expert_weights_norm = false; }},
      {"no group limit",
       [](ModelConfig& c, ModelWeights&) { c.n_expert_groups = c.n_expert_groups_used = 1; }},
      {"half-split rope", [](ModelConfig& c, ModelWeights&) { c.rope.style = RopeStyle::kHalfSplit; }},
      {"scale by the GGUF key length",
       [](ModelConfig& c, ModelWeights&) {
         c.attention_scale = 1.0f / std::sqrt(float(c.kv_lora_rank + c.rope.dims));
       }},
  };
  const auto want = Golden();
  for (const Ablation& ablation : ablations) {
    auto engine = LoadEngine(ModelDir() + "deepseek2.gguf", false);
    ASSERT_TRUE(engine);
    ModelConfig& config = const_cast<ModelConfig&>(engine->model().config);
    ModelWeights& weights = const_cast<ModelWeights&>(engine->model().weights);
    ablation.apply(config, weights);
    const auto stats = testing::CompareLogits(Logits(*engine, Ids()), want, 2048);
    EXPECT_GT(stats.max_abs, 1.0) << ablation.name << ": " << stats.ToString();
    std::printf("ablation %s: %s\n", ablation.name, stats.ToString().c_str());
  }
}


// DeepSeek's YaRN (V2/V3 long-context configs): the synth folder with `rope_scaling` added. The
// rotation frequencies follow YaRN's ramp over the rope dims and the softmax scale is
// (1 + 0.1·mscale_all_dim·ln(factor))² / sqrt(head_dim), both computed here independently; a
// factor of 1 is the unscaled model (the golden logits); mscale_all_dim moves the logits; the
// GGUF written from the folder (llama.cpp's keys) gives the folder's logits.
std::string YarnFolder(const std::string& name, const nlohmann::json& rope_scaling) {
  namespace fs = std::filesystem;
  const fs::path folder = testing::ScratchDir() + "/deepseek2_yarn_" + name;
  fs::remove_all(folder);
  fs::create_directories(folder);
  for (const fs::directory_entry& entry : fs::directory_iterator(ModelDir() + "deepseek2-hf")) {
    if (entry.path().filename() != "config.json") {
      fs::create_symlink(fs::absolute(entry.path()), folder / entry.path().filename());
    }
  }
  nlohmann::json config = testing::ReadJson(ModelDir() + "deepseek2-hf/config.json");
  config["rope_scaling"] = rope_scaling;
  std::ofstream(folder / "config.json") << config.dump(2);
  return folder.string();
}

nlohmann::json Yarn(double factor, double mscale_all_dim) {
  return {{"type", "yarn"},
          {"factor", factor},
          {"original_max_position_embeddings", 64},
          {"beta_fast", 32},
          {"beta_slow", 1},
          {"mscale", mscale_all_dim},
          {"mscale_all_dim", mscale_all_dim}};
}

TEST(DeepSeek2Yarn, FrequenciesAndSoftmaxScaleFollowTheFormulas) {
  constexpr double kFactor = 4.0, kBase = 10000.0, kOriginal = 64.0;
  constexpr int kDims = 8;  // qk_rope_head_dim
  LoadOptions options;
  options.load_tokenizer = false;
  auto model = LoadModel(YarnFolder("formula", Yarn(kFactor, 1.0)), options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelConfig& c = (*model)->config;
  EXPECT_EQ(c.rope.scaling, RopeScalingKind::kYarn);
  EXPECT_FLOAT_EQ(c.rope.attn_factor, 1.0f);
  const double m = 1.0 + 0.1 * std::log(kFactor);
  EXPECT_NEAR(c.attention_scale, m * m / std::sqrt(24.0), 1e-7);
  auto correction = [&](double turns) {
    return kDims * std::log(kOriginal / (turns * 2.0 * M_PI)) / (2.0 * std::log(kBase));
  };
  const double low = std::max(std::floor(correction(32.0)), 0.0);
  double high = std::min(std::ceil(correction(1.0)), double(kDims - 1));
  if (low == high) high += 0.001;
  const std::vector<double>& got = (*model)->weights.rope_inv_freq;
  ASSERT_EQ(got.size(), size_t(kDims / 2));
  for (int i = 0; i < kDims / 2; ++i) {
    const double extrapolated = 1.0 / std::pow(kBase, 2.0 * i / kDims);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double want = extrapolated / kFactor * ramp + extrapolated * (1.0 - ramp);
    EXPECT_NEAR(got[size_t(i)], want, 1e-9 * want) << "pair " << i;
  }
}

TEST(DeepSeek2Yarn, FactorOneIsTheUnscaledModelAndMscaleMatters) {
  auto plain = LoadEngine(YarnFolder("one", Yarn(1.0, 1.0)), false);
  ASSERT_TRUE(plain);
  const auto stats = testing::CompareLogits(Logits(*plain, Ids()), Golden(), 2048);
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
  auto with = LoadEngine(YarnFolder("mscale1", Yarn(4.0, 1.0)), false);
  auto without = LoadEngine(YarnFolder("mscale0", Yarn(4.0, 0.0)), false);
  ASSERT_TRUE(with && without);
  const auto moved = testing::CompareLogits(Logits(*with, Ids()), Logits(*without, Ids()), 2048);
  EXPECT_GT(moved.max_abs, 1e-3) << moved.ToString();
}

TEST(DeepSeek2Yarn, GgufFromTheFolderGivesItsLogits) {
  const std::string folder = YarnFolder("convert", Yarn(4.0, 0.707));
  const std::string out = testing::ScratchDir() + "/deepseek2_yarn.gguf";
  const auto mix = ParseQuantMix("F32");
  ASSERT_TRUE(mix.has_value());
  const Status written = QuantizeHfFolder(folder, out, *mix, false);
  ASSERT_TRUE(written.ok()) << written.message();
  auto file = GgufFile::Open(out);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*(*file)->GetString("deepseek2.rope.scaling.type"), "yarn");
  EXPECT_NEAR(*(*file)->GetFloat("deepseek2.rope.scaling.yarn_log_multiplier"), 0.0707, 1e-5);
  auto from_folder = LoadEngine(folder, false);
  auto from_gguf = LoadEngine(out, false);
  ASSERT_TRUE(from_folder && from_gguf);
  const auto stats =
      testing::CompareLogits(Logits(*from_gguf, Ids()), Logits(*from_folder, Ids()), 2048);
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
  std::remove(out.c_str());
}

TEST(DeepSeek2Yarn, HostileValuesAreOneLineErrors) {
  LoadOptions options;
  options.load_tokenizer = false;
  nlohmann::json bad = Yarn(4.0, 1.0);
  bad["mscale_all_dim"] = "big";
  auto model = LoadModel(YarnFolder("bad_mscale", bad), options);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("'mscale_all_dim' must be a number"), std::string::npos)
      << model.status().message();
  bad = Yarn(4.0, -5.0);
  model = LoadModel(YarnFolder("negative_mscale", bad), options);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("must be finite and not negative"), std::string::npos)
      << model.status().message();
  model = LoadModel(YarnFolder("zero_factor", Yarn(0.0, 1.0)), options);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("yarn factor 0 must be positive"), std::string::npos)
      << model.status().message();
}

}  // namespace
}  // namespace petrel
