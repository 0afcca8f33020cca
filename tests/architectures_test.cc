// Every Llama-family variant from both sources: a tiny random model written as a Hugging Face
// folder and as a llama.cpp-layout GGUF must give the same logits (RoPE layouts, GQA, biases,
// tied output, llama3 RoPE scaling), and the split placement must agree too.
#include <gtest/gtest.h>

#include <set>

#include "core/format/gguf.h"
#include "core/model/loader.h"
#include "core/runtime/engine.h"
#include "util/parity.h"
#include "util/test_data.h"
#include "util/tiny_model.h"

namespace petrel {
namespace {

std::vector<float> Logits(const std::string& path, const std::vector<int32_t>& ids, EngineOptions options = {}) {
  options.n_threads = 2;
  options.context = 128;
  options.load_tokenizer = false;
  auto engine = Engine::Load(path, options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  if (!engine.ok()) return {};
  std::vector<float> logits;
  Status status = (*engine)->Prefill((*engine)->NewSequence(), ids, true, &logits);
  EXPECT_TRUE(status.ok()) << status.message();
  return logits;
}

class Architectures : public ::testing::TestWithParam<testing::TinyModelSpec> {};

TEST_P(Architectures, HuggingFaceFolderAndGgufAgree) {
  const testing::TinyModelSpec spec = GetParam();
  const std::string base = testing::ScratchDir() + "/petrel_arch_" + spec.arch + std::to_string(spec.seed);
  const std::string error = testing::WriteTinyModel(spec, base, base + ".gguf");
  ASSERT_EQ(error, "");
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 37 + 11) % spec.n_vocab);
  const auto hf = Logits(base, ids);
  const auto gguf = Logits(base + ".gguf", ids);
  const auto stats = testing::CompareLogits(gguf, hf, size_t(spec.n_vocab));
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << spec.arch << ": " << stats.ToString();
  EngineOptions split;
  split.device = "ref";
  split.device_layers = 1;
  const auto split_stats = testing::CompareLogits(Logits(base, ids, split), hf, size_t(spec.n_vocab));
  EXPECT_TRUE(testing::Within(split_stats, testing::kF32Tolerance)) << split_stats.ToString();
  std::remove((base + ".gguf").c_str());
  std::remove((base + "/config.json").c_str());
  std::remove((base + "/model.safetensors").c_str());
  rmdir(base.c_str());
}

// A Q8_0 KV cache (heads of 64 = two Q8_0 blocks): the CPU and ref backends compute on the same
// quantized rows, so they agree tightly; against an f32 cache the error is the quantization's.
TEST(KvCacheTypes, Q8_0CacheMatchesRefAndStaysCloseToF32) {
  testing::TinyModelSpec spec;
  spec.dim = 128;
  spec.n_heads = 2;
  spec.n_kv_heads = 1;
  spec.seed = 11;
  const std::string base = testing::ScratchDir() + "/petrel_kvq8_" + std::to_string(getpid());
  ASSERT_EQ(testing::WriteTinyModel(spec, base, base + ".gguf"), "");
  std::vector<int32_t> ids;
  for (int i = 0; i < 50; ++i) ids.push_back((i * 53 + 7) % spec.n_vocab);
  EngineOptions q8;
  q8.kv_type = DType::kQ8_0;
  EngineOptions q8_ref = q8;
  q8_ref.device = "ref";
  q8_ref.device_layers = 100;
  const auto f32 = Logits(base + ".gguf", ids);
  const auto cpu = Logits(base + ".gguf", ids, q8);
  const auto ref = Logits(base + ".gguf", ids, q8_ref);
  const auto exact = testing::CompareLogits(cpu, ref, size_t(spec.n_vocab));
  const auto lossy = testing::CompareLogits(cpu, f32, size_t(spec.n_vocab));
  std::printf("Q8_0 KV: cpu vs ref %s; vs f32 cache %s\n", exact.ToString().c_str(), lossy.ToString().c_str());
  EXPECT_LE(exact.max_abs, 1e-3);
  EXPECT_TRUE(testing::Within(lossy, testing::Tolerance{1.0, 0.05, 0.85})) << lossy.ToString();
  // Heads that are not whole blocks are refused with a clear error.
  EngineOptions bad = q8;
  bad.n_threads = 1;
  bad.load_tokenizer = false;
  auto story = Engine::Load(testing::SharedDir() + "/models/story-gguf/story-f32.gguf", bad);
  ASSERT_FALSE(story.ok());
  EXPECT_NE(story.status().message().find("Q8_0"), std::string::npos) << story.status().message();
  std::remove((base + ".gguf").c_str());
  std::remove((base + "/config.json").c_str());
  std::remove((base + "/model.safetensors").c_str());
  rmdir(base.c_str());
}

// Each architecture's weight table names every tensor once, in both naming schemes.
TEST(WeightTables, NamesAreUnique) {
  const std::string known = KnownArchitectures();
  size_t begin = 0;
  while (begin < known.size()) {
    const size_t end = std::min(known.find(", ", begin), known.size());
    const Architecture* arch = FindArchitectureByGguf(known.substr(begin, end - begin));
    ASSERT_NE(arch, nullptr) << known;
    std::set<std::string> gguf, hf;
    for (const WeightSpec* spec : {&arch->token_embd, &arch->output_norm, &arch->output}) {
      EXPECT_TRUE(gguf.insert(GgufWeightName(*spec, -1)).second) << spec->gguf_name;
      EXPECT_TRUE(hf.insert(HfWeightName(*arch, *spec, -1)).second) << spec->hf_name;
    }
    for (const WeightSpec& spec : arch->layer_weights) {
      EXPECT_TRUE(gguf.insert(GgufWeightName(spec, 0)).second) << spec.gguf_name;
      // Interleaved slices of one HF tensor (gpt-oss's gate_up_proj) share its name, and
      // weights derived from one HF tensor (DeepSeek's k_b and v_b from kv_b_proj) name it.
      if (spec.derived) continue;
      const std::string slice =
          spec.hf_stride > 1 ? "#" + std::to_string(spec.hf_first) : std::string();
      EXPECT_TRUE(hf.insert(HfWeightName(*arch, spec, 0) + slice).second) << spec.hf_name;
    }
    begin = end + 2;
  }
}

// llama.cpp's conversion of the story model: every tensor in the file is one the architecture
// declares (nothing is silently left unread), and every declared weight is bound.
TEST(WeightTables, CoverAReferenceGguf) {
  const std::string path = testing::SharedDir() + "/models/story-gguf/story-f32.gguf";
  LoadOptions options;
  options.load_tokenizer = false;
  auto model = LoadModel(path, options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const Architecture& arch = *(*model)->arch;
  std::set<std::string> declared = {GgufWeightName(arch.token_embd, -1),
                                    GgufWeightName(arch.output_norm, -1),
                                    GgufWeightName(arch.output, -1)};
  for (size_t l = 0; l < (*model)->weights.layers.size(); ++l) {
    const LayerWeights& layer = (*model)->weights.layers[l];
    ASSERT_EQ(layer.size(), arch.layer_weights.size());
    for (size_t i = 0; i < layer.size(); ++i) {
      declared.insert(GgufWeightName(layer.spec(i), int(l)));
      EXPECT_TRUE(layer[i].data || !layer.spec(i).IsRequired((*model)->config))
          << GgufWeightName(layer.spec(i), int(l));
    }
  }
  for (const GgufTensorInfo& tensor : (*model)->gguf->tensors()) {
    EXPECT_TRUE(declared.count(tensor.name)) << tensor.name << " is not declared";
  }
}

testing::TinyModelSpec Spec(const char* arch, bool tied, bool bias, bool llama3, unsigned seed) {
  testing::TinyModelSpec spec;
  spec.arch = arch;
  spec.tied = tied;
  spec.qkv_bias = bias;
  spec.llama3_rope = llama3;
  spec.seed = seed;
  return spec;
}

INSTANTIATE_TEST_SUITE_P(
    Variants, Architectures,
    ::testing::Values(Spec("llama", false, false, false, 1), Spec("llama", true, false, false, 2),
                      Spec("llama", false, false, true, 3), Spec("mistral", false, false, false, 4),
                      Spec("qwen2", true, true, false, 5)),
    [](const auto& info) { return info.param.arch + std::to_string(info.param.seed); });

}  // namespace
}  // namespace petrel
