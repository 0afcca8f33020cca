// Every device backend of the build (Vulkan, CUDA) end to end, through `petrel` as users run it:
// golden logits with every block and with half of them offloaded, greedy text the same for 0,
// half and all blocks, four sequences decoded together as each alone, `--gpu-layers auto`,
// `--profile`, `info --devices` and the device memory plan, and the errors (bad files and flags
// with --device NAME, a bad device index, no driver). The same checks run for each backend that is
// compiled in; every test that needs a device skips, saying why, where there is none.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/generation/generate.h"
#include "core/generation/sequence.h"
#include "core/runtime/backend_registry.h"
#include "core/runtime/engine.h"
#include "util/cli_runner.h"
#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::CompareLogits;
using testing::ExpectOneLineError;
using testing::Output;
using testing::Petrel;
using testing::ReadF32File;
using testing::SharedDir;
using testing::StoryF32Gguf;
using testing::Tolerance;

constexpr Tolerance kQ8ActTolerance{1.0, 0.05, 0.85};    // golden README §4, 8-bit activations
constexpr Tolerance kQ8KActTolerance{1.2, 0.06, 0.80};   // K-quants and IQ4_XS

std::string Golden(const std::string& rel) { return SharedDir() + "/golden/" + rel; }

// The device backends compiled into this build (those that list devices), in registry order.
std::vector<std::string> DeviceBackends() {
  std::vector<std::string> names;
  for (const BackendFactory& factory : CompiledBackends()) {
    if (factory.list_devices != nullptr) names.push_back(factory.name);
  }
  return names;
}

// Why there is no device of `backend` to test on, or "" when there is one.
std::string NoDeviceReason(const std::string& backend) {
  const BackendFactory* factory = FindBackend(backend);
  if (!factory || !factory->list_devices) return "this build has no " + backend + " backend";
  auto devices = factory->list_devices();
  const std::string kind = DeviceKindName(backend);
  if (!devices.ok()) {
    // Backends that name the missing device themselves ("no CUDA device: ...") say it once.
    const std::string message = devices.status().message();
    return message.rfind("no ", 0) == 0 ? message : "no " + kind + " device: " + message;
  }
  if (devices->empty()) return "no " + kind + " device";
  return std::string();
}

#define SKIP_WITHOUT_DEVICE(backend)                                       \
  do {                                                                     \
    const std::string reason = NoDeviceReason(backend);                    \
    if (!reason.empty()) GTEST_SKIP() << "skipped: " << reason;            \
  } while (0)

// Tests of one device backend, named by the parameter.
class DeviceBackend : public ::testing::TestWithParam<std::string> {
 protected:
  const std::string& device() const { return GetParam(); }
};

// Sets an environment variable for the life of the object (petrel inherits it through popen).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    had_ = std::getenv(name) != nullptr;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

std::string Join(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    if (!out.empty()) out += ',';
    out += std::to_string(id);
  }
  return out;
}

// `petrel logits` of `ids` with the last `gpu_layers` blocks on `device` (F32 KV cache, as
// the golden references); empty on failure.
std::vector<float> DeviceLogits(const std::string& device, const std::string& model,
                                const std::vector<int32_t>& ids, const std::string& gpu_layers) {
  const std::string out = testing::ScratchDir() + "/device_backend_test_" + device + ".f32";
  const Output run = Petrel({"logits", "-m", model, "--ids", Join(ids), "-o", out, "-t", "2",
                             "--cache-type", "f32", "--device", device, "--gpu-layers",
                             gpu_layers});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::vector<float> logits = ReadF32File(out);
  std::remove(out.c_str());
  return logits;
}

TEST_P(DeviceBackend, StoryF32LogitsWithAllAndHalfTheBlocks) {
  SKIP_WITHOUT_DEVICE(device());
  const nlohmann::json cases = testing::ReadJson(Golden("story/logits.json"));
  ASSERT_TRUE(cases.is_array());
  for (const std::string layers : {"all", "half"}) {
    for (const auto& entry : cases) {
      const auto ids = entry["ids"].get<std::vector<int32_t>>();
      const auto want = ReadF32File(Golden("story/" + entry["file"].get<std::string>()));
      const auto stats = CompareLogits(DeviceLogits(device(), StoryF32Gguf(), ids, layers), want, 2048);
      EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance))
          << "--gpu-layers " << layers << " " << entry["name"] << ": " << stats.ToString();
      std::printf("%s story-f32 --gpu-layers %s %s: %s\n", device().c_str(), layers.c_str(),
                  entry["name"].get<std::string>().c_str(), stats.ToString().c_str());
    }
  }
}

// One synthetic model and its reference logits: by default models/synth-tiny/tiny-v2048-<type>.gguf
// and golden/synth-tiny/<type>.f32; the low-bit types' files are in models/synth-tiny-lowbit
// (golden/synth-tiny/README.md), the ternary ones on their own base with its own ids.
struct SynthCase {
  const char* type;
  Tolerance tolerance;
  const char* model = nullptr;     // under models/, when not the default
  const char* golden = nullptr;    // under golden/synth-tiny/, when not the default
  const char* ids = "tiny_v2048";  // the key of parity.json holding the token ids
};

// golden/synth-tiny/README.md, "Tolerances": per family of the low-bit types.
constexpr Tolerance kIQLowBitTolerance{1.5, 0.06, 0.85};
constexpr Tolerance kMXFP4Tolerance{0.8, 0.04, 0.85};
constexpr Tolerance kTernaryTolerance{1.0, 0.04, 0.90};
constexpr Tolerance kQ1_0Tolerance{0.15, 0.0015, 0.95};

SynthCase LowBit(const char* type, const char* model, Tolerance tolerance) {
  return SynthCase{type, tolerance, model};
}
SynthCase Ternary(const char* type, const char* model, const char* golden, Tolerance tolerance) {
  return SynthCase{type, tolerance, model, golden, "tiny_tern_v2048"};
}

void PrintTo(const SynthCase& c, std::ostream* os) { *os << c.type; }

class DeviceSynthParity
    : public ::testing::TestWithParam<std::tuple<std::string, SynthCase>> {};

TEST_P(DeviceSynthParity, LogitsWithAllAndHalfTheBlocks) {
  const std::string device = std::get<0>(GetParam());
  SKIP_WITHOUT_DEVICE(device);
  const SynthCase c = std::get<1>(GetParam());
  std::string lower = c.type;
  for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  const std::string model =
      SharedDir() + "/models/" +
      (c.model ? std::string(c.model) : "synth-tiny/tiny-v2048-" + lower + ".gguf");
  const nlohmann::json parity = testing::ReadJson(Golden("synth-tiny/parity.json"));
  const auto ids = parity[c.ids]["ids"].get<std::vector<int32_t>>();
  const auto want = ReadF32File(
      Golden("synth-tiny/" + (c.golden ? std::string(c.golden) : std::string(c.type) + ".f32")));
  ASSERT_FALSE(want.empty());
  for (const std::string layers : {"all", "half"}) {
    const auto stats = CompareLogits(DeviceLogits(device, model, ids, layers), want, 2048);
    EXPECT_TRUE(testing::Within(stats, c.tolerance))
        << c.type << " --gpu-layers " << layers << ": " << stats.ToString();
    std::printf("%s synth-tiny %s --gpu-layers %s: %s\n", device.c_str(), c.type, layers.c_str(),
                stats.ToString().c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, DeviceSynthParity,
    ::testing::Combine(
        ::testing::ValuesIn(DeviceBackends()),
        ::testing::Values(
            SynthCase{"F32", testing::kF32Tolerance}, SynthCase{"F16", testing::kF16Tolerance},
            SynthCase{"Q8_0", kQ8ActTolerance}, SynthCase{"Q4_0", kQ8ActTolerance},
            SynthCase{"Q4_K", kQ8KActTolerance}, SynthCase{"IQ4_XS", kQ8KActTolerance},
            // The low-bit types (only ffn_down holds the IQ type in these files).
            LowBit("IQ1_S", "synth-tiny-lowbit/tiny-v2048-iq1_s.gguf", kIQLowBitTolerance),
            LowBit("IQ1_M", "synth-tiny-lowbit/tiny-v2048-iq1_m.gguf", kIQLowBitTolerance),
            LowBit("IQ2_XXS", "synth-tiny-lowbit/tiny-v2048-iq2_xxs.gguf", kIQLowBitTolerance),
            LowBit("IQ2_XS", "synth-tiny-lowbit/tiny-v2048-iq2_xs.gguf", kIQLowBitTolerance),
            LowBit("IQ2_S", "synth-tiny-lowbit/tiny-v2048-iq2_s.gguf", kIQLowBitTolerance),
            LowBit("IQ3_XXS", "synth-tiny-lowbit/tiny-v2048-iq3_xxs.gguf", kIQLowBitTolerance),
            LowBit("IQ3_S", "synth-tiny-lowbit/tiny-v2048-iq3_s.gguf", kIQLowBitTolerance),
            LowBit("MXFP4", "synth-tiny-lowbit/tiny-v2048-mxfp4.gguf", kMXFP4Tolerance),
            Ternary("TQ1_0", "synth-tiny-lowbit/tiny-tern-v2048-tq1_0.gguf", "tern-TQ1_0.f32",
                    kTernaryTolerance),
            Ternary("TQ2_0", "synth-tiny-lowbit/tiny-tern-v2048-tq2_0.gguf", "tern-TQ2_0.f32",
                    kTernaryTolerance),
            Ternary("Q2_0", "synth-tiny-lowbit/tiny-tern-v2048-q2_0.gguf", "tern-Q2_0.f32",
                    kTernaryTolerance),
            Ternary("Q1_0", "synth-tiny-lowbit/tiny-tern-v2048-q1_0.gguf", "tern-Q1_0.f32",
                    kQ1_0Tolerance))),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + std::string(std::get<1>(info.param).type);
    });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DeviceSynthParity);

// `petrel run --json` greedy ids of the golden prompts, on the CPU or with blocks offloaded.
std::vector<int32_t> GreedyIds(const std::string& prompt, const std::vector<std::string>& device_args) {
  std::vector<std::string> args = {"run", "-m", StoryF32Gguf(), "-p", prompt, "-n", "48",
                                   "--temp", "0", "--json", "-t", "2", "--cache-type", "f32"};
  args.insert(args.end(), device_args.begin(), device_args.end());
  const Output run = Petrel(args);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const auto json = nlohmann::json::parse(run.out, nullptr, false);
  if (json.is_discarded() || !json.contains("new_ids")) return {};
  return json["new_ids"].get<std::vector<int32_t>>();
}

TEST_P(DeviceBackend, GreedyStoryTextIsTheSameForNoneHalfAndAllBlocksOffloaded) {
  SKIP_WITHOUT_DEVICE(device());
  for (const auto& line : testing::ReadJsonLines(Golden("story/greedy.jsonl"))) {
    const std::string prompt = line["prompt"].get<std::string>();
    const std::vector<int32_t> cpu = GreedyIds(prompt, {});
    ASSERT_FALSE(cpu.empty()) << prompt;
    for (const std::string layers : {"0", "half", "all"}) {
      EXPECT_EQ(GreedyIds(prompt, {"--device", device(), "--gpu-layers", layers}), cpu)
          << "--gpu-layers " << layers << ", prompt: " << prompt;
    }
  }
}

TEST_P(DeviceBackend, FourSequencesOffloadedTogetherGetTheTokensTheyGetAlone) {
  SKIP_WITHOUT_DEVICE(device());
  EngineOptions options;
  options.n_threads = 2;
  options.context = 256;
  options.max_sequences = 4;
  options.max_batch_tokens = 16;  // prompts arrive in chunks while other sequences sample
  options.kv_type = DType::kF32;
  options.device = device();
  options.device_layer_rule = GpuLayerRule::kAll;
  auto loaded = Engine::Load(StoryF32Gguf(), options);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  Engine& engine = **loaded;
  EXPECT_NE(engine.PlacementString().find("output: " + device()), std::string::npos)
      << engine.PlacementString();
  auto prompt = [](size_t length, size_t salt) {
    std::vector<int32_t> ids = {1};
    for (size_t i = 1; i < length; ++i) ids.push_back(int32_t(3 + (i * 131 + salt * 977) % 2000));
    return ids;
  };
  GenerateOptions greedy;
  greedy.sampling.temperature = 0.0f;
  greedy.max_new_tokens = 16;
  greedy.ignore_eos = true;
  const std::vector<std::vector<int32_t>> prompts = {prompt(3, 0), prompt(40, 1), prompt(9, 2),
                                                     prompt(21, 3)};
  std::vector<GenerateResult> alone;
  for (const auto& ids : prompts) {
    const SeqId seq = engine.NewSequence();
    auto result = Generate(engine, seq, ids, greedy, nullptr);
    ASSERT_TRUE(result.ok()) << result.status().message();
    alone.push_back(std::move(result).value());
    engine.FreeSequence(seq);
  }
  std::vector<std::unique_ptr<Sequence>> owned;
  std::vector<Sequence*> together;
  for (const auto& ids : prompts) {
    auto sequence = Sequence::Create(engine, engine.NewSequence(), ids, greedy);
    ASSERT_TRUE(sequence.ok()) << sequence.status().message();
    owned.push_back(std::move(sequence).value());
    together.push_back(owned.back().get());
  }
  RunSequences(engine, together);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(together[i]->finished());
    EXPECT_TRUE(together[i]->status().ok()) << together[i]->status().message();
    const GenerateResult& got = together[i]->result();
    EXPECT_EQ(got.new_ids, alone[i].new_ids);
    ASSERT_EQ(got.tokens.size(), alone[i].tokens.size());
    for (size_t t = 0; t < got.tokens.size(); ++t) {
      EXPECT_NEAR(got.tokens[t].logprob, alone[i].tokens[t].logprob, 1e-3) << "token " << t;
    }
  }
}

TEST_P(DeviceBackend, AutoProfileAndBench) {
  SKIP_WITHOUT_DEVICE(device());
  const std::string& name = device();
  const Output run = Petrel({"run", "-m", StoryF32Gguf(), "-p", "Once upon a time", "-n", "8",
                             "--temp", "0", "-t", "2", "--device", name, "--gpu-layers",
                             "auto", "--profile", "-v"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("placement layers 0-1: " + name + ", output: " + name), std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("profile " + name + ": mat_mul"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("profile " + name + ": total"), std::string::npos) << run.err;
  for (const std::string layers : {"0", "half", "all"}) {
    const Output bench = Petrel({"bench", "-m", StoryF32Gguf(), "-p", "16", "-n", "4", "-r", "1",
                                 "-t", "2", "--device", name, "--gpu-layers", layers,
                                 "--profile", "--json"});
    ASSERT_EQ(bench.exit_code, 0) << layers << ": " << bench.err;
    size_t lines = 0;
    size_t start = 0;
    for (size_t end; (end = bench.out.find('\n', start)) != std::string::npos; start = end + 1) {
      const auto json = nlohmann::json::parse(bench.out.substr(start, end - start), nullptr, false);
      ASSERT_FALSE(json.is_discarded()) << bench.out;
      ++lines;
      EXPECT_GT(json["tokens_per_second"].get<double>(), 0.0);
      EXPECT_EQ(json["gpu_layers"].get<size_t>(), layers == "0" ? 0u : layers == "half" ? 1u : 3u);
      // Device time only where something ran on the device (the CPU times its ops too).
      bool device_ops = false;
      for (const auto& op : json["profile"]) device_ops |= op["backend"] == name;
      EXPECT_EQ(device_ops, layers != "0") << json.dump();
    }
    EXPECT_EQ(lines, 2u) << bench.out;
  }
}

TEST_P(DeviceBackend, InfoListsTheDeviceAndPrintsThePlan) {
  SKIP_WITHOUT_DEVICE(device());
  const std::string& name = device();
  const Output devices = Petrel({"info", "--devices"});
  EXPECT_EQ(devices.exit_code, 0) << devices.err;
  char listed[64];
  std::snprintf(listed, sizeof listed, "%-8s %s:0 ", name.c_str(), name.c_str());
  EXPECT_NE(devices.out.find(listed), std::string::npos) << devices.out;
  EXPECT_NE(devices.out.find("cpu      host"), std::string::npos) << devices.out;
  const Output plan = Petrel({"info", "-m", StoryF32Gguf(), "--device", name, "--gpu-layers", "auto"});
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  const std::string plan_line = "device memory    " + name + " plan, per block: weights";
  for (const char* needle : {plan_line.c_str(), "KV cache",
                             "activations", "--gpu-layers auto places", "placement        layers"}) {
    EXPECT_NE(plan.out.find(needle), std::string::npos) << needle << "\n" << plan.out;
  }
}

TEST_P(DeviceBackend, BadFilesAndFlagsAreOneLineErrors) {
  SKIP_WITHOUT_DEVICE(device());
  const std::string& name = device();
  const std::vector<std::string> device = {"--device", name};
  auto with_device = [&](std::vector<std::string> args) {
    args.insert(args.end(), device.begin(), device.end());
    return Petrel(args);
  };
  ExpectOneLineError(with_device({"run", "-m", "/nonexistent/model.gguf", "-p", "x"}), "no such file");
  const std::string junk = testing::ScratchDir() + "/device_backend_test_junk_" + name + ".gguf";
  { std::ofstream(junk) << "GGUF\x03\0\0\0 truncated"; }
  ExpectOneLineError(with_device({"run", "-m", junk, "-p", "x"}), "gguf");
  ExpectOneLineError(with_device({"logits", "-m", junk, "--ids", "1", "-o", "/dev/null"}), "gguf");
  { std::ofstream(junk) << "not a model at all"; }
  ExpectOneLineError(with_device({"info", "-m", junk}), "magic");
  std::remove(junk.c_str());
  ExpectOneLineError(with_device({"logits", "-m", StoryF32Gguf(), "--ids", "1,99999", "-o", "/dev/null"}),
                     "vocabulary");
  ExpectOneLineError(with_device({"run", "-m", StoryF32Gguf(), "-p", "x", "--gpu-layers", "-1"}),
                     "--gpu-layers: -1 is outside the range [0, 100000]");
  ExpectOneLineError(with_device({"run", "-m", StoryF32Gguf(), "-p", "x", "--gpu-layers", "most"}),
                     "--gpu-layers: 'most' is not a count");
  ExpectOneLineError(with_device({"run", "-m", StoryF32Gguf(), "-p", "x", "--cache-type", "q3"}), "cache-type");
  ExpectOneLineError(Petrel({"run", "-m", StoryF32Gguf(), "-p", "x", "--device", name + ":x"}),
                     "--device: '" + name + ":x' is not a device");
  const Output index = Petrel({"run", "-m", StoryF32Gguf(), "-p", "x", "--device", name + ":99"});
  ExpectOneLineError(index, "--device " + name + ":99: this machine has ");
  EXPECT_NE(index.err.find(DeviceKindName(name) + " device"), std::string::npos) << index.err;
  EXPECT_NE(index.err.find("(0: "), std::string::npos) << index.err;
}

INSTANTIATE_TEST_SUITE_P(Compiled, DeviceBackend, ::testing::ValuesIn(DeviceBackends()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DeviceBackend);

// No Vulkan driver: the loader finds no ICD. Needs no device, only a build with the backend (the
// CUDA backend's "no device" checks are in cuda_host_test, run on machines without a GPU).
TEST(VulkanCli, WithoutADriverDeviceVulkanIsOneClearError) {
  if (!FindBackend("vulkan")) GTEST_SKIP() << "skipped: this build has no vulkan backend";
  for (const char* variable : {"VK_ICD_FILENAMES", "VK_DRIVER_FILES"}) {
    SCOPED_TRACE(variable);
    ScopedEnv hidden(variable, "/nonexistent/petrel-no-icd.json");
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"run", "-m", StoryF32Gguf(), "-p", "x", "--device", "vulkan"},
          std::vector<std::string>{"run", "-m", StoryF32Gguf(), "-p", "x", "--device", "vulkan:0"},
          std::vector<std::string>{"info", "-m", StoryF32Gguf(), "--device", "vulkan"}}) {
      const Output output = Petrel(args);
      EXPECT_NE(output.exit_code, 0);
      EXPECT_EQ(output.err, "error: no Vulkan device; run without --device or install a driver\n");
    }
    // Listing devices is not an error: the backend's line says why it has none.
    const Output devices = Petrel({"info", "--devices"});
    EXPECT_EQ(devices.exit_code, 0) << devices.err;
    EXPECT_NE(devices.out.find("vulkan   unavailable: "), std::string::npos) << devices.out;
    EXPECT_NE(devices.out.find("cpu      host"), std::string::npos) << devices.out;
  }
}

}  // namespace
}  // namespace petrel
