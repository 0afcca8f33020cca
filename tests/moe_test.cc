// Mixture of experts end to end: Qwen3-MoE from ../shared/models/synth-arch (GGUF and HF folder)
// against the float64 reference and llama.cpp's greedy continuation (golden README,
// "synth-arch"); a Mixtral-style `llama` with experts written by `petrel synth` against the
// scalar `ref` backend and, with one expert, against the dense model of the same weights; and
// one-line errors for malformed expert configs.
#include <gtest/gtest.h>

#include <cstdio>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/convert/quantize_hf.h"
#include "core/convert/quantize_model.h"
#include "core/convert/synth_model.h"
#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/generation/generate.h"
#include "core/model/loader.h"
#include "core/runtime/engine.h"
#include "util/parity.h"
#include "util/test_data.h"
#include "util/tiny_model.h"

namespace petrel {
namespace {

using testing::SharedDir;

std::string ModelDir() { return SharedDir() + "/models/synth-arch/"; }
std::string GoldenDir() { return SharedDir() + "/golden/synth-arch/"; }
std::string Scratch(const std::string& name) { return testing::ScratchDir() + "/moe_" + name; }

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
  EXPECT_TRUE(engine.Prefill(seq, ids, /*all_logits=*/true, &logits).ok());
  engine.FreeSequence(seq);
  return logits;
}

class Qwen3Moe : public ::testing::TestWithParam<bool> {
 protected:
  std::string Path() const { return ModelDir() + (GetParam() ? "qwen3moe-hf" : "qwen3moe.gguf"); }
};

TEST_P(Qwen3Moe, LogitsMatchTheReference) {
  const nlohmann::json& entry = Parity()["qwen3moe"];
  const auto ids = entry["ids"].get<std::vector<int32_t>>();
  const auto want = testing::ReadF32File(GoldenDir() + entry["logits"].get<std::string>());
  for (const std::string device : {"", "ref"}) {
    auto engine = LoadEngine(Path(), /*tokenizer=*/false, device);
    ASSERT_TRUE(engine);
    const auto stats = testing::CompareLogits(Logits(*engine, ids), want, 2048);
    EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance))
        << Path() << " on " << (device.empty() ? "cpu" : device) << ": " << stats.ToString();
    std::printf("%s on %s: %s\n", Path().c_str(), device.empty() ? "cpu" : device.c_str(),
                stats.ToString().c_str());
  }
}

TEST_P(Qwen3Moe, GreedyContinuationMatchesLlamaCpp) {
  auto engine = LoadEngine(Path(), /*tokenizer=*/true);
  ASSERT_TRUE(engine);
  const nlohmann::json& greedy = Parity()["qwen3moe"]["greedy"];
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

// Through `petrel quantize` to Q8_0 (HF folders stack their per-expert tensors on the way):
// the bounds of arch_families_test's Q8_0 check.
TEST_P(Qwen3Moe, QuantizedToQ8_0) {
  const std::string out = Scratch(GetParam() ? "hf-q8_0.gguf" : "gguf-q8_0.gguf");
  const auto mix = ParseQuantMix("Q8_0");
  ASSERT_TRUE(mix.has_value());
  const Status written = GetParam() ? QuantizeHfFolder(Path(), out, *mix, false)
                                    : QuantizeGgufModel(Path(), out, *mix, false);
  ASSERT_TRUE(written.ok()) << written.message();
  auto cpu = LoadEngine(out, /*tokenizer=*/false);
  ASSERT_TRUE(cpu);
  const nlohmann::json& entry = Parity()["qwen3moe"];
  const auto ids = entry["ids"].get<std::vector<int32_t>>();
  const auto want = testing::ReadF32File(GoldenDir() + entry["logits"].get<std::string>());
  const auto stats = testing::CompareLogits(Logits(*cpu, ids), want, 2048);
  EXPECT_LE(stats.rel_rms, 0.10) << out << ": " << stats.ToString();
  EXPECT_GE(stats.top1, 0.85) << out << ": " << stats.ToString();
  std::printf("%s: vs float64 %s\n", out.c_str(), stats.ToString().c_str());
  std::remove(out.c_str());
}

INSTANTIATE_TEST_SUITE_P(Sources, Qwen3Moe, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "hf" : "gguf"; });

// A Mixtral-style model: arch `llama` with `llama.expert_count`, from `petrel synth`.
std::string WriteMixtral(const std::string& name, int64_t n_experts, int64_t n_used) {
  auto spec = ParseSynthShape("moe-tiny");
  EXPECT_TRUE(spec.ok());
  spec->type = DType::kF32;
  spec->n_vocab = 300;
  spec->n_experts = n_experts;
  spec->n_experts_used = n_used;
  const std::string path = Scratch(name + ".gguf");
  const Status written = WriteSynthModel(*spec, path);
  EXPECT_TRUE(written.ok()) << written.message();
  return path;
}

const std::vector<int32_t> kIds = {1, 17, 250, 3, 99, 42, 42, 7, 180, 5, 64, 33, 12, 290, 8, 77};

TEST(Mixtral, CpuMatchesRef) {
  const std::string path = WriteMixtral("mixtral", 4, 2);
  auto cpu = LoadEngine(path, false);
  auto ref = LoadEngine(path, false, "ref");
  ASSERT_TRUE(cpu && ref);
  EXPECT_EQ(cpu->model().config.n_experts, 4);
  const auto want = Logits(*ref, kIds);
  const auto stats = testing::CompareLogits(Logits(*cpu, kIds), want, 300);
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
  std::printf("mixtral-style cpu vs ref: %s\n", stats.ToString().c_str());
  // Batch invariance: each position's logits decoded one token at a time equal the prompt's.
  const SeqId seq = cpu->NewSequence();
  std::vector<float> step, prompt_logits = Logits(*cpu, kIds);
  for (size_t t = 0; t < kIds.size(); ++t) {
    ASSERT_TRUE(cpu->Prefill(seq, {kIds[t]}, /*all_logits=*/true, &step).ok());
    for (size_t i = 0; i < 300; ++i) {
      ASSERT_EQ(step[i], prompt_logits[t * 300 + i]) << "position " << t << " logit " << i;
    }
  }
  std::remove(path.c_str());
}

// Mixtral from a Hugging Face folder (block_sparse_moe.experts.<e>.w1/w2/w3, half-split RoPE)
// and from the GGUF llama.cpp's converter would write (arch llama, stacked experts, permuted
// Q/K rows): the same logits.
// `petrel synth --shape deepseek2-tiny`: latent attention, one dense block, then routed and shared
// experts, in the layout the deepseek2 loader reads; the cpu backend against ref, and the cache
// holding one latent row (kv_lora + rope) per layer and token.
TEST(DeepSeek2Synth, LoadsAndCpuMatchesRef) {
  auto spec = ParseSynthShape("deepseek2-tiny");
  ASSERT_TRUE(spec.ok());
  spec->type = DType::kF32;
  spec->n_vocab = 300;
  const std::string path = Scratch("deepseek2.gguf");
  const Status written = WriteSynthModel(*spec, path);
  ASSERT_TRUE(written.ok()) << written.message();
  auto cpu = LoadEngine(path, false);
  auto ref = LoadEngine(path, false, "ref");
  ASSERT_TRUE(cpu && ref);
  const ModelConfig& c = cpu->model().config;
  EXPECT_EQ(c.architecture, "deepseek2");
  EXPECT_EQ(c.kv_lora_rank, spec->kv_lora_rank);
  EXPECT_EQ(c.rope.dims, spec->qk_rope_dim);
  EXPECT_EQ(c.n_dense_layers, 1);
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_FALSE(cpu->kv_has_values());
  EXPECT_EQ(cpu->kv_row_bytes(),
            *RowBytes(cpu->kv_type(), uint64_t(spec->kv_lora_rank + spec->qk_rope_dim)));
  const auto stats = testing::CompareLogits(Logits(*cpu, kIds), Logits(*ref, kIds), 300);
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
}

TEST(Mixtral, HfFolderAndGgufAgree) {
  testing::TinyModelSpec spec;
  spec.arch = "mixtral";
  const std::string folder = Scratch("mixtral_hf"), gguf = Scratch("mixtral_tiny.gguf");
  std::filesystem::remove_all(folder);
  spec.n_vocab = 2048;  // the story tokenizer's, copied in for the conversion below
  ASSERT_EQ(testing::WriteTinyModel(spec, folder, gguf), "");
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    std::filesystem::copy_file(ModelDir() + "qwen3moe-hf/" + name, folder + "/" + name);
  }
  auto hf = LoadEngine(folder, false);
  auto file = LoadEngine(gguf, false);
  ASSERT_TRUE(hf && file);
  EXPECT_EQ(hf->model().config.n_experts, 4);
  EXPECT_EQ(file->model().config.n_experts_used, 2);
  const auto stats = testing::CompareLogits(Logits(*hf, kIds), Logits(*file, kIds), 2048);
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
  std::printf("mixtral HF folder vs GGUF: %s\n", stats.ToString().c_str());
  // `petrel quantize` of the folder writes what llama.cpp reads: arch llama, stacked experts.
  const std::string converted = Scratch("mixtral_converted.gguf");
  const auto mix = ParseQuantMix("F32");
  ASSERT_TRUE(mix.has_value());
  const Status written = QuantizeHfFolder(folder, converted, *mix, false);
  ASSERT_TRUE(written.ok()) << written.message();
  auto gguf_file = GgufFile::Open(converted);
  ASSERT_TRUE(gguf_file.ok());
  EXPECT_EQ(*(*gguf_file)->GetString("general.architecture"), "llama");
  ASSERT_NE((*gguf_file)->FindTensor("blk.0.ffn_down_exps.weight"), nullptr);
  auto reloaded = LoadEngine(converted, false);
  ASSERT_TRUE(reloaded);
  const auto converted_stats =
      testing::CompareLogits(Logits(*reloaded, kIds), Logits(*file, kIds), 2048);
  EXPECT_TRUE(testing::Within(converted_stats, testing::kF32Tolerance))
      << converted_stats.ToString();
  std::remove(converted.c_str());
}

// One expert that every token takes with weight 1 is the dense FFN of the same weights: the
// file with its expert tensors renamed to the dense names must give the same logits.
TEST(Mixtral, OneExpertEqualsTheDenseModel) {
  const std::string moe = WriteMixtral("one_expert", 1, 1);
  auto file = GgufFile::Open(moe);
  ASSERT_TRUE(file.ok());
  GgufWriter writer;
  for (const auto& [key, value] : (*file)->metadata()) {
    if (key.find("expert") != std::string::npos || key == "general.alignment") continue;
    writer.CopyValue(key, value);
  }
  for (const GgufTensorInfo& tensor : (*file)->tensors()) {
    if (tensor.name.find("ffn_gate_inp") != std::string::npos) continue;
    std::string name = tensor.name;
    TensorDesc desc = tensor.desc;
    if (const size_t at = name.find("_exps"); at != std::string::npos) {
      name.erase(at, 5);
      desc = TensorDesc::Make(desc.dtype, {desc.ne[0], desc.ne[1]});
    }
    writer.AddTensor(name, desc, [&tensor](void* dst) {
      std::memcpy(dst, tensor.data, tensor.desc.bytes());
    });
  }
  const std::string dense = Scratch("one_expert_dense.gguf");
  ASSERT_TRUE(writer.Write(dense).ok());
  auto moe_engine = LoadEngine(moe, false);
  auto dense_engine = LoadEngine(dense, false);
  ASSERT_TRUE(moe_engine && dense_engine);
  EXPECT_EQ(dense_engine->model().config.n_experts, 0);
  const auto stats =
      testing::CompareLogits(Logits(*moe_engine, kIds), Logits(*dense_engine, kIds), 300);
  EXPECT_LE(stats.max_abs, 1e-5) << stats.ToString();
  std::remove(moe.c_str());
  std::remove(dense.c_str());
}

// A step computes only its routed experts: with every router row equal, each token's top-1 is
// expert 0 (ties go to the lower index), and experts 1-3 filled with NaN leave the logits finite
// and equal to those of the file whose other experts are finite.
TEST(Mixtral, OnlyRoutedExpertsAreComputed) {
  const std::string path = WriteMixtral("routed", 4, 1);
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  auto rewrite = [&](bool poison, const std::string& name) {
    GgufWriter writer;
    for (const auto& [key, value] : (*file)->metadata()) {
      if (key != "general.alignment") writer.CopyValue(key, value);
    }
    for (const GgufTensorInfo& tensor : (*file)->tensors()) {
      const bool router = tensor.name.find("ffn_gate_inp") != std::string::npos;
      const bool experts = tensor.name.find("_exps") != std::string::npos;
      writer.AddTensor(tensor.name, tensor.desc, [&tensor, router, experts, poison](void* dst) {
        std::memcpy(dst, tensor.data, tensor.desc.bytes());
        float* values = static_cast<float*>(dst);
        const size_t per_expert = size_t(tensor.desc.ne[0] * tensor.desc.ne[1]);
        if (router) {  // [dim, 4]: every expert's row a copy of expert 0's
          const size_t dim = size_t(tensor.desc.ne[0]);
          for (size_t e = 1; e < 4; ++e) std::memcpy(values + e * dim, values, dim * sizeof(float));
        } else if (experts && poison) {
          std::fill(values + per_expert, values + 4 * per_expert, NAN);
        }
      });
    }
    const std::string out = Scratch(name + ".gguf");
    EXPECT_TRUE(writer.Write(out).ok());
    return out;
  };
  const std::string clean = rewrite(false, "routed_clean"), poisoned = rewrite(true, "routed_nan");
  auto clean_engine = LoadEngine(clean, false);
  auto poisoned_engine = LoadEngine(poisoned, false);
  ASSERT_TRUE(clean_engine && poisoned_engine);
  const auto want = Logits(*clean_engine, kIds);
  const auto got = Logits(*poisoned_engine, kIds);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "logit " << i;
  // Decode steps too (one token, the path that must read only the routed rows).
  const SeqId seq = poisoned_engine->NewSequence();
  std::vector<float> step;
  for (size_t t = 0; t < 4; ++t) {
    ASSERT_TRUE(poisoned_engine->Prefill(seq, {kIds[t]}, true, &step).ok());
    for (size_t i = 0; i < 300; ++i) ASSERT_EQ(step[i], want[t * 300 + i]);
  }
  for (const std::string& p : {path, clean, poisoned}) std::remove(p.c_str());
}

// HF `norm_topk_prob: false` keeps the routed probabilities as they are: the logits move away
// from the renormalised reference (by 5.7 at most, golden README's ablation).
TEST(Qwen3MoeRouting, WithoutRenormalisationDiffers) {
  const std::string folder = Scratch("hf_no_norm");
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  nlohmann::json config = testing::ReadJson(ModelDir() + "qwen3moe-hf/config.json");
  config["norm_topk_prob"] = false;
  std::ofstream(folder + "/config.json") << config.dump(2);
  std::filesystem::create_symlink(
      std::filesystem::absolute(ModelDir() + "qwen3moe-hf/model.safetensors"),
      folder + "/model.safetensors");
  auto engine = LoadEngine(folder, false);
  ASSERT_TRUE(engine);
  EXPECT_FALSE(engine->model().config.expert_weights_norm);
  const nlohmann::json& entry = Parity()["qwen3moe"];
  const auto ids = entry["ids"].get<std::vector<int32_t>>();
  const auto want = testing::ReadF32File(GoldenDir() + entry["logits"].get<std::string>());
  const auto stats = testing::CompareLogits(Logits(*engine, ids), want, 2048);
  EXPECT_GT(stats.max_abs, 1.0) << stats.ToString();
  std::printf("norm_topk_prob false vs the renormalised reference: %s\n",
              stats.ToString().c_str());
}

// Malformed expert configs fail to load with one line naming the problem.
std::string WriteGgufWith(const std::string& source, const std::map<std::string, uint32_t>& uints,
                          const std::string& name,
                          const std::map<std::string, TensorDesc>& reshape = {}) {
  auto file = GgufFile::Open(source);
  EXPECT_TRUE(file.ok());
  GgufWriter writer;
  for (const auto& [key, value] : (*file)->metadata()) {
    if (uints.count(key) || key == "general.alignment") continue;
    writer.CopyValue(key, value);
  }
  for (const auto& [key, value] : uints) writer.SetU32(key, value);
  for (const GgufTensorInfo& tensor : (*file)->tensors()) {
    auto it = reshape.find(tensor.name);
    const TensorDesc desc = it == reshape.end() ? tensor.desc : it->second;
    writer.AddTensor(tensor.name, desc, [&tensor, desc](void* dst) {
      std::memset(dst, 0, desc.bytes());
      std::memcpy(dst, tensor.data, std::min(desc.bytes(), tensor.desc.bytes()));
    });
  }
  const std::string path = Scratch(name + ".gguf");
  EXPECT_TRUE(writer.Write(path).ok());
  return path;
}

std::string WriteHfWith(const nlohmann::json& patch, const std::string& name) {
  const std::string folder = Scratch(name);
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  nlohmann::json config = testing::ReadJson(ModelDir() + "qwen3moe-hf/config.json");
  config.merge_patch(patch);
  std::ofstream(folder + "/config.json") << config.dump(2);
  std::filesystem::create_symlink(std::filesystem::absolute(ModelDir() + "qwen3moe-hf/model.safetensors"),
                                  folder + "/model.safetensors");
  return folder;
}

void ExpectOneLineError(const std::string& path, const std::string& needle) {
  LoadOptions options;
  options.load_tokenizer = false;
  auto model = LoadModel(path, options);
  ASSERT_FALSE(model.ok()) << path << " loaded";
  const std::string message = model.status().message();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find(needle), std::string::npos) << message;
  std::printf("%s\n", message.c_str());
}

TEST(MoeHostile, GgufConfigs) {
  const std::string q = ModelDir() + "qwen3moe.gguf";
  ExpectOneLineError(WriteGgufWith(q, {{"qwen3moe.expert_count", 0}}, "zero"),
                     "qwen3moe.expert_count is missing or 0");
  ExpectOneLineError(WriteGgufWith(q, {{"qwen3moe.expert_used_count", 5}}, "topk"),
                     "experts used per token 5 is invalid for 4 experts");
  ExpectOneLineError(WriteGgufWith(q, {{"qwen3moe.expert_used_count", 0}}, "topk0"),
                     "experts used per token 0");
  ExpectOneLineError(WriteGgufWith(q, {{"qwen3moe.expert_count", 8}}, "count8"),
                     "ffn_gate_inp.weight has shape");
  ExpectOneLineError(
      WriteGgufWith(q, {}, "shape",
                    {{"blk.1.ffn_down_exps.weight", TensorDesc::Make(DType::kF32, {96, 64, 3})}}),
      "blk.1.ffn_down_exps.weight has shape [96, 64, 3], expected [96, 64, 4]");
  ExpectOneLineError(
      WriteGgufWith(q, {{"qwen3moe.expert_feed_forward_length", 48}}, "width"),
      "ffn_gate_exps.weight has shape");
}

TEST(MoeHostile, HfConfigs) {
  ExpectOneLineError(WriteHfWith({{"num_experts", 0}}, "hf_zero"), "num_experts is missing or 0");
  ExpectOneLineError(WriteHfWith({{"num_experts_per_tok", 9}}, "hf_topk"),
                     "experts used per token 9 is invalid for 4 experts");
  ExpectOneLineError(WriteHfWith({{"moe_intermediate_size", 80}}, "hf_width"),
                     "mlp.experts.0.gate_proj.weight is F32 [64, 96], expected F32 [64, 80]");
  ExpectOneLineError(WriteHfWith({{"num_experts", 6}}, "hf_count"), "mlp.gate.weight has shape");
  ExpectOneLineError(WriteHfWith({{"mlp_only_layers", {0}}}, "hf_dense"), "mlp_only_layers");
}

}  // namespace
}  // namespace petrel
