// Every Llama-family variant from both sources: a tiny random model written as a Hugging Face
// folder and as a llama.cpp-layout GGUF must give the same logits (RoPE layouts, GQA, biases,
// tied output, llama3 RoPE scaling), and the split placement must agree too.
#include <gtest/gtest.h>

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
