// The dense families of ../shared/models/synth-arch (Qwen3, Gemma 2, Gemma 3, Phi-3), each from
// its GGUF and from its Hugging Face folder: logits for 48 ids against the float64 reference
// (golden README, "synth-arch": max abs <= 1e-3, rel RMS <= 1e-5, top-1 100 %), greedy
// continuations equal to llama.cpp's (single-token decode steps through the KV cache, past the
// 16-token windows), and one-line errors for malformed configs of each family.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/convert/quantize_hf.h"
#include "core/convert/quantize_model.h"
#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/generation/generate.h"
#include "core/model/loader.h"
#include "core/runtime/backend_registry.h"
#include "core/runtime/engine.h"
#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::SharedDir;

std::string ModelDir() { return SharedDir() + "/models/synth-arch/"; }
std::string GoldenDir() { return SharedDir() + "/golden/synth-arch/"; }

const nlohmann::json& Parity() {
  static const nlohmann::json parity = testing::ReadJson(GoldenDir() + "parity.json");
  return parity;
}

struct Source {
  const char* arch;
  bool hf;  // the HF folder, else the GGUF
};

std::string PathOf(const Source& source) {
  return ModelDir() + source.arch + (source.hf ? "-hf" : ".gguf");
}

// `device`: every block and the head on that backend where it runs them (the scalar `ref`:
// exact dequantized weights, f32 activations); empty: the CPU.
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

class SynthArch : public ::testing::TestWithParam<Source> {};

TEST_P(SynthArch, LogitsMatchTheReference) {
  const Source source = GetParam();
  auto engine = LoadEngine(PathOf(source), /*tokenizer=*/false);
  ASSERT_TRUE(engine);
  const nlohmann::json& entry = Parity()[source.arch];
  const auto ids = entry["ids"].get<std::vector<int32_t>>();
  const auto want = testing::ReadF32File(GoldenDir() + entry["logits"].get<std::string>());
  const SeqId seq = engine->NewSequence();
  std::vector<float> logits;
  ASSERT_TRUE(engine->Prefill(seq, ids, /*all_logits=*/true, &logits).ok());
  const auto stats = testing::CompareLogits(logits, want, 2048);
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << PathOf(source) << ": "
                                                              << stats.ToString();
  std::printf("%s: %s\n", PathOf(source).c_str(), stats.ToString().c_str());
}

// The same logits with the blocks and the head offloaded to every other backend of this build,
// each of which runs every op of these families (no layer is kept on the CPU; Phi-3's fused
// parts are placed one by one).
TEST_P(SynthArch, LogitsOnEveryBackend) {
  const Source source = GetParam();
  const nlohmann::json& entry = Parity()[source.arch];
  const auto ids = entry["ids"].get<std::vector<int32_t>>();
  const auto want = testing::ReadF32File(GoldenDir() + entry["logits"].get<std::string>());
  for (const std::string& backend : AvailableBackends()) {
    if (backend == "cpu") continue;
    EngineOptions options;
    options.n_threads = 2;
    options.context = 256;
    options.load_tokenizer = false;
    options.device = backend;
    options.device_layers = 1000;
    auto engine = Engine::Load(PathOf(source), options);
    if (!engine.ok()) {  // a device backend compiled in without a device here
      std::printf("%s: skipped: %s\n", backend.c_str(), engine.status().message().c_str());
      continue;
    }
    const Placement& placement = (*engine)->placement();
    EXPECT_TRUE(placement.notes.empty()) << backend << ": " << (*engine)->PlacementString();
    EXPECT_EQ(placement.output, 1) << backend;
    for (const BackendId b : placement.layers) EXPECT_EQ(b, 1) << backend;
    const SeqId seq = (*engine)->NewSequence();
    std::vector<float> logits;
    ASSERT_TRUE((*engine)->Prefill(seq, ids, /*all_logits=*/true, &logits).ok()) << backend;
    const auto stats = testing::CompareLogits(logits, want, 2048);
    EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance))
        << PathOf(source) << " on " << backend << ": " << stats.ToString();
    std::printf("%s on %s: %s\n", PathOf(source).c_str(), backend.c_str(),
                stats.ToString().c_str());
  }
}

TEST_P(SynthArch, GreedyContinuationMatchesLlamaCpp) {
  const Source source = GetParam();
  auto engine = LoadEngine(PathOf(source), /*tokenizer=*/true);
  ASSERT_TRUE(engine);
  const nlohmann::json& greedy = Parity()[source.arch]["greedy"];
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

std::vector<float> Logits(Engine& engine, const std::vector<int32_t>& ids) {
  const SeqId seq = engine.NewSequence();
  std::vector<float> logits;
  EXPECT_TRUE(engine.Prefill(seq, ids, /*all_logits=*/true, &logits).ok());
  engine.FreeSequence(seq);
  return logits;
}

// `petrel quantize` to Q8_0, from the GGUF and from the HF folder straight to GGUF (the two
// give the same logits, as measured below). These random fixtures amplify rounding far
// more than real models (tiny embeddings, final norms of 3-6): measured rel RMS / max abs
//   Q8_0 weights exact, f32 activations (`ref`) vs float64: phi3 2.2 % / 0.51, qwen3 3.7 % /
//     0.88, gemma2 4.1 % / 1.1, gemma3 6.1 % / 2.1;
//   the CPU's 8-bit activations vs `ref` on the same file: 2.0 %, 3.0 %, 3.6 %, 5.6 % (max 2.1);
//   CPU vs float64: 2.9 %, 4.7 %, 5.5 %, 7.8 % (max 1.9), top-1 >= 87.5 %.
// so the golden README's Q8_0 row (rel RMS <= 5 %, max abs <= 1.0, top-1 >= 85 %) holds for
// phi3 and qwen3 only. The bounds here are that row's top-1 and twice its rel RMS: a wrong block
// decoder (12-41 % from weights alone) or a config key lost in the round trip (window, soft-cap,
// norm offset, local RoPE base: each moves the logits by 5 to 27) lands far outside them.
TEST_P(SynthArch, QuantizedToQ8_0) {
  const Source source = GetParam();
  const std::string out = testing::ScratchDir() + "/arch_families_" + source.arch +
                          (source.hf ? "_hf" : "_gguf") + "-q8_0.gguf";
  const auto mix = ParseQuantMix("Q8_0");
  ASSERT_TRUE(mix.has_value());
  const Status written = source.hf ? QuantizeHfFolder(PathOf(source), out, *mix, false)
                                   : QuantizeGgufModel(PathOf(source), out, *mix, false);
  ASSERT_TRUE(written.ok()) << written.message();
  auto cpu = LoadEngine(out, /*tokenizer=*/false);
  auto ref = LoadEngine(out, /*tokenizer=*/false, "ref");
  ASSERT_TRUE(cpu && ref);
  const nlohmann::json& entry = Parity()[source.arch];
  const auto ids = entry["ids"].get<std::vector<int32_t>>();
  const auto want = testing::ReadF32File(GoldenDir() + entry["logits"].get<std::string>());
  const std::vector<float> cpu_logits = Logits(*cpu, ids), ref_logits = Logits(*ref, ids);
  const auto engine_stats = testing::CompareLogits(cpu_logits, ref_logits, 2048);
  const auto golden_stats = testing::CompareLogits(cpu_logits, want, 2048);
  for (const auto& [stats, what] : {std::pair{engine_stats, "cpu vs ref"},
                                    std::pair{golden_stats, "cpu vs float64"}}) {
    EXPECT_LE(stats.rel_rms, 0.10) << out << " " << what << ": " << stats.ToString();
    EXPECT_GE(stats.top1, 0.85) << out << " " << what << ": " << stats.ToString();
  }
  std::printf("%s: cpu vs ref %s; vs float64 %s\n", out.c_str(), engine_stats.ToString().c_str(),
              golden_stats.ToString().c_str());
  std::remove(out.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Dense, SynthArch,
    ::testing::Values(Source{"qwen3", false}, Source{"qwen3", true}, Source{"gemma2", false},
                      Source{"gemma2", true}, Source{"gemma3", false}, Source{"gemma3", true},
                      Source{"phi3", false}, Source{"phi3", true}),
    [](const auto& info) { return std::string(info.param.arch) + (info.param.hf ? "_hf" : "_gguf"); });

// Phi-3's q/k/v and gate/up are views into the mapped fused tensors, not copies.
TEST(SynthArchPhi3, FusedPartsAreViewsIntoTheFile) {
  LoadOptions options;
  options.load_tokenizer = false;
  auto model = LoadModel(ModelDir() + "phi3.gguf", options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const LayerWeights& layer = (*model)->weights.layers[0];
  const GgufTensorInfo* qkv = (*model)->gguf->FindTensor("blk.0.attn_qkv.weight");
  ASSERT_NE(qkv, nullptr);
  std::vector<const void*> part_data;
  for (size_t i = 0; i < layer.size(); ++i) {
    if (layer.spec(i).IsFusedPart()) part_data.push_back(layer[i].data);
  }
  ASSERT_EQ(part_data.size(), 5u);  // q, k, v, gate, up
  const char* base = static_cast<const char*>(qkv->data);
  const size_t row_bytes = qkv->desc.row_bytes();
  EXPECT_EQ(part_data[0], base);
  EXPECT_EQ(part_data[1], base + 128 * row_bytes);        // after q's 4 heads of 32
  EXPECT_EQ(part_data[2], base + (128 + 64) * row_bytes);  // after k's 2 heads
  // Bytes counted once: the fused tensors, not their parts again.
  size_t file_bytes = 0;
  for (const GgufTensorInfo& t : (*model)->gguf->tensors()) file_bytes += t.desc.bytes();
  EXPECT_EQ((*model)->weight_bytes, file_bytes);
}

// Malformed configs: a copy of a fixture with some keys replaced must fail to load with one
// line that names the problem.
std::string Scratch(const std::string& name) {
  return testing::ScratchDir() + "/arch_families_" + name;
}

// The GGUF `arch`.gguf with `set` applied to its metadata (numbers as f32 or u32 by key).
std::string WriteGgufWith(const std::string& arch, const std::map<std::string, double>& floats,
                          const std::map<std::string, uint32_t>& uints, const std::string& name) {
  auto file = GgufFile::Open(ModelDir() + arch + ".gguf");
  EXPECT_TRUE(file.ok());
  GgufWriter writer;
  for (const auto& [key, value] : (*file)->metadata()) {
    if (floats.count(key) || uints.count(key) || key == "general.alignment") continue;
    writer.CopyValue(key, value);
  }
  for (const auto& [key, value] : floats) writer.SetF32(key, float(value));
  for (const auto& [key, value] : uints) writer.SetU32(key, value);
  for (const GgufTensorInfo& tensor : (*file)->tensors()) {
    writer.AddTensor(tensor.name, tensor.desc, [&tensor](void* dst) {
      std::memcpy(dst, tensor.data, tensor.desc.bytes());
    });
  }
  const std::string path = Scratch(name + ".gguf");
  EXPECT_TRUE(writer.Write(path).ok());
  return path;
}

// The HF folder of `arch` with `patch` merged into its config.json (weights linked).
std::string WriteHfWith(const std::string& arch, const nlohmann::json& patch,
                        const std::string& name) {
  const std::string folder = Scratch(name);
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  nlohmann::json config = testing::ReadJson(ModelDir() + arch + "-hf/config.json");
  config.merge_patch(patch);
  std::ofstream(folder + "/config.json") << config.dump(2);
  std::filesystem::create_symlink(ModelDir() + arch + "-hf/model.safetensors",
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

TEST(SynthArchHostile, GgufConfigs) {
  ExpectOneLineError(WriteGgufWith("gemma2", {}, {{"gemma2.attention.sliding_window", 0}}, "g2_w0"),
                     "sliding window 0");
  ExpectOneLineError(WriteGgufWith("gemma3", {}, {{"gemma3.attention.sliding_window", 0}}, "g3_w0"),
                     "sliding window 0");
  ExpectOneLineError(
      WriteGgufWith("gemma2", {{"gemma2.attn_logit_softcapping", -50.0}}, {}, "g2_cap"),
      "attention-logit soft-cap -50");
  ExpectOneLineError(
      WriteGgufWith("gemma2", {{"gemma2.final_logit_softcapping", -30.0}}, {}, "g2_final"),
      "final-logit soft-cap -30");
  ExpectOneLineError(
      WriteGgufWith("gemma3", {}, {{"gemma3.attention.sliding_window_pattern", 0}}, "g3_pat"),
      "pattern 0");
  ExpectOneLineError(WriteGgufWith("qwen3", {}, {{"qwen3.attention.key_length", 16},
                                                 {"qwen3.attention.value_length", 16}},
                                   "q3_head"),
                     "attn_q.weight has shape");
  ExpectOneLineError(WriteGgufWith("gemma3", {}, {{"gemma3.attention.value_length", 16}}, "g3_v"),
                     "value heads of 16");
  ExpectOneLineError(
      WriteGgufWith("phi3", {}, {{"phi3.attention.head_count_kv", 4}}, "phi_kv_heads"),
      "attn_qkv.weight has shape");
}

TEST(SynthArchHostile, HfConfigs) {
  ExpectOneLineError(WriteHfWith("gemma2", {{"sliding_window", 0}}, "g2_hf_w0"),
                     "sliding window 0");
  ExpectOneLineError(WriteHfWith("gemma2", {{"attn_logit_softcapping", -50.0}}, "g2_hf_cap"),
                     "attention-logit soft-cap -50");
  ExpectOneLineError(WriteHfWith("gemma2", {{"final_logit_softcapping", -1.0}}, "g2_hf_final"),
                     "final-logit soft-cap -1");
  ExpectOneLineError(WriteHfWith("gemma2", {{"query_pre_attn_scalar", 0}}, "g2_hf_scalar"),
                     "query_pre_attn_scalar");
  ExpectOneLineError(
      WriteHfWith("gemma3", {{"layer_types", {"sliding_attention", "full_attention"}}}, "g3_hf_lt"),
      "layer_types");
  ExpectOneLineError(WriteHfWith("gemma3", {{"head_dim", 16}}, "g3_hf_head"), "has shape");
  ExpectOneLineError(WriteHfWith("qwen3", {{"head_dim", 48}}, "q3_hf_head"), "has shape");
  ExpectOneLineError(WriteHfWith("phi3", {{"partial_rotary_factor", 2.0}}, "phi_hf_rot"),
                     "partial_rotary_factor");
}

}  // namespace
}  // namespace petrel
