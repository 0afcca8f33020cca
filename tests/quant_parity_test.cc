// Parity of every synth-tiny quantized file with its numpy reference (golden/synth-tiny), through
// the exact-f32 path (`ref` backend: weights dequantized exactly, f32 activations; the F32
// tolerance row) and the CPU fast path (8-bit activations; the type's row of golden README §4).
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <string>

#include "core/runtime/engine.h"
#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::CompareLogits;
using testing::ReadF32File;
using testing::SharedDir;

// golden README §4: 8-bit activations (Q8_0/Q8_1) and Q8_K activations.
constexpr testing::Tolerance kQ8ActTolerance{1.0, 0.05, 0.85};
constexpr testing::Tolerance kQ8KActTolerance{1.2, 0.06, 0.80};

struct QuantCase {
  const char* type;
  testing::Tolerance fast;
};

std::vector<float> RunLogits(const std::string& type, const EngineOptions& base) {
  std::string lower = type;
  for (char& c : lower) c = char(std::tolower(c));
  EngineOptions options = base;
  options.load_tokenizer = false;
  options.n_threads = 2;
  options.context = 64;
  auto engine =
      Engine::Load(SharedDir() + "/models/synth-tiny/tiny-v2048-" + lower + ".gguf", options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  if (!engine.ok()) return {};
  const nlohmann::json parity = testing::ReadJson(SharedDir() + "/golden/synth-tiny/parity.json");
  const auto ids = parity["tiny_v2048"]["ids"].get<std::vector<int32_t>>();
  const SeqId seq = (*engine)->NewSequence();
  std::vector<float> logits;
  const Status status = (*engine)->Prefill(seq, ids, /*all_logits=*/true, &logits);
  EXPECT_TRUE(status.ok()) << status.message();
  return logits;
}

class QuantParity : public ::testing::TestWithParam<QuantCase> {};

TEST_P(QuantParity, ExactF32PathMeetsF32Row) {
  const QuantCase c = GetParam();
  EngineOptions options;
  options.device = "ref";
  options.device_layers = 1000;  // every block and the output head
  const auto want = ReadF32File(SharedDir() + "/golden/synth-tiny/" + c.type + ".f32");
  const auto stats = CompareLogits(RunLogits(c.type, options), want, 2048);
  EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << c.type << ": " << stats.ToString();
  std::printf("synth-tiny %s ref (exact f32): %s\n", c.type, stats.ToString().c_str());
}

TEST_P(QuantParity, CpuFastPathMeetsTypeRow) {
  const QuantCase c = GetParam();
  const auto want = ReadF32File(SharedDir() + "/golden/synth-tiny/" + c.type + ".f32");
  const auto stats = CompareLogits(RunLogits(c.type, EngineOptions{}), want, 2048);
  EXPECT_TRUE(testing::Within(stats, c.fast)) << c.type << ": " << stats.ToString();
  std::printf("synth-tiny %s cpu (8-bit activations): %s\n", c.type, stats.ToString().c_str());
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, QuantParity,
    ::testing::Values(QuantCase{"Q8_0", kQ8ActTolerance}, QuantCase{"Q4_0", kQ8ActTolerance},
                      QuantCase{"Q4_1", kQ8ActTolerance}, QuantCase{"Q5_0", kQ8ActTolerance},
                      QuantCase{"Q5_1", kQ8ActTolerance}, QuantCase{"IQ4_NL", kQ8ActTolerance},
                      QuantCase{"Q2_K", kQ8KActTolerance}, QuantCase{"Q3_K", kQ8KActTolerance},
                      QuantCase{"Q4_K", kQ8KActTolerance}, QuantCase{"Q5_K", kQ8KActTolerance},
                      QuantCase{"Q6_K", kQ8KActTolerance}, QuantCase{"IQ4_XS", kQ8KActTolerance}),
    [](const auto& info) { return std::string(info.param.type); });

}  // namespace
}  // namespace petrel
