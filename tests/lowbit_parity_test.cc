// Parity of every file of synth-tiny-lowbit (the IQ1/IQ2/IQ3 types and mixes, MXFP4, and the
// ternary-base TQ1_0/TQ2_0/Q1_0/Q2_0 files) with its float64 reference (golden/synth-tiny): the
// exact-f32 path (`ref`: weights decoded exactly, f32 activations; the F32 row), the CPU kernels
// on every SIMD target this machine runs (8-bit activations; the type's row of parity.json
// `more_types_tolerances`), Vulkan where a device is present, and the CPU's batch invariance:
// the logits of a prompt are the same bits whatever the micro-batch size.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/runtime/backend_registry.h"  // FindBackend
#include "core/runtime/engine.h"
#include "hwy/targets.h"  // SupportedAndGeneratedTargets, SetSupportedTargetsForTest
#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::CompareLogits;
using testing::ReadF32File;
using testing::SharedDir;

constexpr size_t kVocab = 2048;

struct LowBitCase {
  const char* name;  // the type's key in parity.json (and its logits file's name)
  bool ternary;      // on the ternary base: tiny-tern-v2048-*.gguf, tern-*.f32
};

std::string Lower(std::string text) {
  for (char& c : text) c = char(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string ModelPath(const LowBitCase& c) {
  return SharedDir() + "/models/synth-tiny-lowbit/" +
         (c.ternary ? "tiny-tern-v2048-" : "tiny-v2048-") + Lower(c.name) + ".gguf";
}

std::vector<float> Want(const LowBitCase& c) {
  return ReadF32File(SharedDir() + "/golden/synth-tiny/" + (c.ternary ? "tern-" : "") + c.name +
                     ".f32");
}

const nlohmann::json& Parity() {
  static const nlohmann::json parity =
      testing::ReadJson(SharedDir() + "/golden/synth-tiny/parity.json");
  return parity;
}

std::vector<int32_t> Ids(const LowBitCase& c) {
  return Parity()[c.ternary ? "tiny_tern_v2048" : "tiny_v2048_more_types"]["ids"]
      .get<std::vector<int32_t>>();
}

testing::Tolerance TypeRow(const LowBitCase& c) {
  const nlohmann::json& row = Parity()["more_types_tolerances"]["rows"][c.name];
  return {row["max_abs"].get<double>(), row["rel_rms"].get<double>(),
          row["top1_min"].get<double>()};
}

// All logits of the 48-token sequence, or empty (with a test failure) when the model does not
// load or run.
std::vector<float> RunLogits(const LowBitCase& c, EngineOptions options) {
  options.load_tokenizer = false;
  options.n_threads = 2;
  options.context = 64;
  auto engine = Engine::Load(ModelPath(c), options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  if (!engine.ok()) return {};
  const SeqId seq = (*engine)->NewSequence();
  std::vector<float> logits;
  const Status status = (*engine)->Prefill(seq, Ids(c), /*all_logits=*/true, &logits);
  EXPECT_TRUE(status.ok()) << status.message();
  return logits;
}

class LowBitParity : public ::testing::TestWithParam<LowBitCase> {};

TEST_P(LowBitParity, ExactF32PathMeetsF32Row) {
  const LowBitCase c = GetParam();
  EngineOptions options;
  options.device = "ref";
  options.device_layers = 1000;  // every block and the output head
  const auto stats = CompareLogits(RunLogits(c, options), Want(c), kVocab);
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << c.name << ": "
                                                               << stats.ToString();
  std::printf("lowbit %s ref (exact f32): %s\n", c.name, stats.ToString().c_str());
}

// Every Highway target this CPU supports, capped as PETREL_CPU_TARGET caps it.
TEST_P(LowBitParity, CpuEveryTargetMeetsTypeRow) {
  const LowBitCase c = GetParam();
  const auto want = Want(c);
  const int64_t supported = hwy::SupportedTargets();
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(supported & ~(target - 1));
    const auto stats = CompareLogits(RunLogits(c, EngineOptions{}), want, kVocab);
    EXPECT_TRUE(testing::Within(stats, TypeRow(c)))
        << c.name << " on " << hwy::TargetName(target) << ": " << stats.ToString();
    std::printf("lowbit %s cpu %s: %s\n", c.name, hwy::TargetName(target),
                stats.ToString().c_str());
  }
  hwy::SetSupportedTargetsForTest(0);
}

// A token's logits do not depend on how many tokens share its pass.
TEST_P(LowBitParity, CpuLogitsIndependentOfMicroBatch) {
  const LowBitCase c = GetParam();
  EngineOptions whole;
  whole.ubatch_tokens = 64;
  EngineOptions pieces;
  pieces.ubatch_tokens = 5;
  pieces.max_batch_tokens = 5;
  const auto a = RunLogits(c, whole);
  const auto b = RunLogits(c, pieces);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
      << c.name << ": logits differ between micro-batches of 64 and of 5 tokens";
}

TEST_P(LowBitParity, VulkanMeetsTypeRow) {
  const LowBitCase c = GetParam();
  if (!FindBackend("vulkan")) GTEST_SKIP() << "skipped: this build has no vulkan backend";
  EngineOptions options;
  options.device = "vulkan";
  options.device_layers = 1000;
  options.load_tokenizer = false;
  options.n_threads = 2;
  options.context = 64;
  auto engine = Engine::Load(ModelPath(c), options);
  if (!engine.ok() && engine.status().message().find("no Vulkan device") != std::string::npos) {
    GTEST_SKIP() << "skipped: " << engine.status().message();
  }
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  const SeqId seq = (*engine)->NewSequence();
  std::vector<float> logits;
  ASSERT_TRUE((*engine)->Prefill(seq, Ids(c), /*all_logits=*/true, &logits).ok());
  const auto stats = CompareLogits(logits, Want(c), kVocab);
  EXPECT_TRUE(testing::Within(stats, TypeRow(c))) << c.name << ": " << stats.ToString();
  std::printf("lowbit %s vulkan: %s\n", c.name, stats.ToString().c_str());
}

INSTANTIATE_TEST_SUITE_P(
    AllFiles, LowBitParity,
    ::testing::Values(LowBitCase{"IQ1_S", false}, LowBitCase{"IQ1_M", false},
                      LowBitCase{"IQ2_XXS", false}, LowBitCase{"IQ2_XS", false},
                      LowBitCase{"IQ2_S", false}, LowBitCase{"IQ3_XXS", false},
                      LowBitCase{"IQ3_S", false}, LowBitCase{"MXFP4", false},
                      LowBitCase{"IQ2_M", false}, LowBitCase{"IQ3_M", false},
                      LowBitCase{"IQ4_XS_MIX", false}, LowBitCase{"TQ1_0", true},
                      LowBitCase{"TQ2_0", true}, LowBitCase{"Q2_0", true},
                      LowBitCase{"Q1_0", true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace petrel
