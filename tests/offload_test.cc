// Mixed CPU/device placement end to end (docs/OFFLOAD.md): the mixture-of-experts synthetic
// models with their experts on the CPU (--cpu-moe, --n-cpu-moe), tensor rules (-ot), and
// blocks split over two devices (--tensor-split; lavapipe has one Vulkan device, so the splits
// tested are CPU + Vulkan and the Vulkan device opened twice), each against the CPU-only logits
// and greedy text; where each tensor group went; the plan's device weight bytes against what
// the backend allocated; and the placement errors. Every test skips, saying why, without a
// Vulkan device.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

// Why there is no Vulkan device to test on, or "" when there is one.
std::string NoVulkanReason() {
  const BackendFactory* factory = FindBackend("vulkan");
  if (!factory || !factory->list_devices) return "this build has no vulkan backend";
  auto devices = factory->list_devices();
  if (!devices.ok()) return "no Vulkan device: " + devices.status().message();
  if (devices->empty()) return "no Vulkan device";
  return "";
}

#define SKIP_WITHOUT_VULKAN()                                   \
  do {                                                          \
    const std::string reason = NoVulkanReason();                \
    if (!reason.empty()) GTEST_SKIP() << "skipped: " << reason; \
  } while (0)

struct MoeModel {
  std::string name;  // the key of golden/<set>/parity.json
  std::string set;   // synth-arch or synth-arch2
  std::string path() const { return SharedDir() + "/models/" + set + "/" + name + ".gguf"; }
  std::vector<int32_t> ids() const {
    const nlohmann::json parity =
        testing::ReadJson(SharedDir() + "/golden/" + set + "/parity.json");
    return parity[name]["ids"].get<std::vector<int32_t>>();
  }
};

// The mixture-of-experts models there are: Qwen3-MoE, and gpt-oss (experts with biases and the
// clamped activation) when its synthetic file is present.
std::vector<MoeModel> MoeModels() {
  std::vector<MoeModel> models = {{"qwen3moe", "synth-arch"}};
  if (std::FILE* f = std::fopen((SharedDir() + "/models/synth-arch2/gpt-oss.gguf").c_str(), "rb")) {
    std::fclose(f);
    models.push_back({"gpt-oss", "synth-arch2"});
  }
  return models;
}

// The placements checked against the CPU: all on the device, the experts of every block or of
// the first one on the CPU, rules, and splits over two devices.
const std::vector<std::vector<std::string>>& Placements() {
  static const std::vector<std::vector<std::string>> kPlacements = {
      {"--device", "vulkan"},
      {"--device", "vulkan", "--cpu-moe"},
      {"--device", "vulkan", "--n-cpu-moe", "1"},
      {"--device", "vulkan", "--override-tensor", "blk\\.0\\.ffn_.*=CPU"},
      {"--device", "Vulkan0", "-ot", "blk\\.1\\.attn_.*=CPU,^output=cpu", "-ncmoe", "1"},
      {"--device", "cpu,vulkan", "--tensor-split", "1,1"},
      {"--device", "vulkan,vulkan", "--tensor-split", "3,1", "--cpu-moe"},
  };
  return kPlacements;
}

std::string Join(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

std::string Describe(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& arg : args) out += (out.empty() ? "" : " ") + arg;
  return out;
}

// `petrel logits` of `ids` (F32 KV cache) with `placement`; empty on failure.
std::vector<float> Logits(const MoeModel& model, const std::vector<std::string>& placement) {
  const std::string out = testing::ScratchDir() + "/offload_test_" + model.name + ".f32";
  std::vector<std::string> args = {"logits", "-m", model.path(), "--ids", Join(model.ids()),
                                   "-o",     out,  "-t",         "2",     "--cache-type",
                                   "f32"};
  args.insert(args.end(), placement.begin(), placement.end());
  const Output run = Petrel(args);
  EXPECT_EQ(run.exit_code, 0) << Describe(placement) << "\n" << run.err;
  std::vector<float> logits = ReadF32File(out);
  std::remove(out.c_str());
  return logits;
}

// `petrel run --temp 0` text.
std::string GreedyText(const MoeModel& model, const std::vector<std::string>& placement) {
  std::vector<std::string> args = {"run", "-m",           model.path(), "-p", "Once upon a time",
                                   "-n",  "24",           "--temp",     "0",  "-t",
                                   "2",   "--cache-type", "f32"};
  args.insert(args.end(), placement.begin(), placement.end());
  const Output run = Petrel(args);
  EXPECT_EQ(run.exit_code, 0) << Describe(placement) << "\n" << run.err;
  return run.out;
}

TEST(OffloadTest, MoeLogitsMatchTheCpuInEveryPlacement) {
  SKIP_WITHOUT_VULKAN();
  for (const MoeModel& model : MoeModels()) {
    const std::vector<float> cpu = Logits(model, {});
    ASSERT_FALSE(cpu.empty()) << model.name;
    for (const auto& placement : Placements()) {
      const auto stats = CompareLogits(Logits(model, placement), cpu, 2048);
      EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance))
          << model.name << " " << Describe(placement) << ": " << stats.ToString();
      std::printf("%s %s: %s\n", model.name.c_str(), Describe(placement).c_str(),
                  stats.ToString().c_str());
    }
  }
}

TEST(OffloadTest, MoeGreedyTextIsTheCpusInEveryPlacement) {
  SKIP_WITHOUT_VULKAN();
  for (const MoeModel& model : MoeModels()) {
    const std::string cpu = GreedyText(model, {});
    ASSERT_FALSE(cpu.empty()) << model.name;
    for (const auto& placement : Placements()) {
      EXPECT_EQ(GreedyText(model, placement), cpu) << model.name << " " << Describe(placement);
    }
  }
}

TEST(OffloadTest, VerboseLoadSaysWhereEachTensorGroupWent) {
  SKIP_WITHOUT_VULKAN();
  const MoeModel model{"qwen3moe", "synth-arch"};
  const Output moe = Petrel({"-v", "run", "-m", model.path(), "-p", "Once", "-n", "1", "--device",
                             "vulkan", "--cpu-moe"});
  ASSERT_EQ(moe.exit_code, 0) << moe.err;
  // The blocks stay on the device; their experts are on the CPU.
  EXPECT_NE(moe.err.find("layers 0-1: vulkan, output: vulkan"), std::string::npos) << moe.err;
  for (const char* name : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}) {
    EXPECT_NE(moe.err.find(std::string(name) + " of layers 0-1: cpu"), std::string::npos)
        << name << "\n"
        << moe.err;
  }
  const Output one = Petrel({"-v", "run", "-m", model.path(), "-p", "Once", "-n", "1", "--device",
                             "vulkan", "-ot", "blk\\.1\\.attn_q\\.weight=CPU"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  // The rule moves one tensor of one block: its node runs on the CPU, the rest of the block on
  // the device.
  EXPECT_NE(one.err.find("attn_q.weight of layer 1: cpu"), std::string::npos) << one.err;
  EXPECT_EQ(one.err.find("attn_k.weight of"), std::string::npos) << one.err;
  EXPECT_NE(one.err.find("layers 0-1: vulkan"), std::string::npos) << one.err;
  const Output split = Petrel({"-v", "run", "-m", model.path(), "-p", "Once", "-n", "1", "--device",
                               "vulkan,vulkan", "--tensor-split", "1,1"});
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_NE(split.err.find("layers 0-0: vulkan#1, layers 1-1: vulkan#2, output: vulkan#2"),
            std::string::npos)
      << split.err;
}

// Loads `model` in process on the Vulkan device with the experts of the first `cpu_moe_layers`
// blocks on the CPU and the tensor rules `rules`.
std::unique_ptr<Engine> LoadOnVulkan(const MoeModel& model, size_t cpu_moe_layers,
                                     const std::string& rules) {
  EngineOptions options;
  options.device = "vulkan";
  options.device_layer_rule = GpuLayerRule::kAll;
  options.n_threads = 2;
  options.context = 64;
  options.cpu_moe_layers = cpu_moe_layers;
  if (!rules.empty()) {
    auto parsed = ParseTensorRules(rules);
    EXPECT_TRUE(parsed.ok()) << parsed.status().message();
    if (parsed.ok()) options.tensor_rules = std::move(parsed).value();
  }
  auto engine = Engine::Load(model.path(), options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

TEST(OffloadTest, PlannedDeviceWeightBytesAreWhatTheDeviceAllocated) {
  SKIP_WITHOUT_VULKAN();
  const MoeModel model{"qwen3moe", "synth-arch"};
  struct Case {
    size_t cpu_moe_layers;
    std::string rules;
  };
  size_t all_bytes = 0;
  for (const Case& c :
       {Case{0, ""}, Case{1, ""}, Case{SIZE_MAX, ""}, Case{SIZE_MAX, "blk\\.0\\.attn_.*=CPU"}}) {
    const std::unique_ptr<Engine> engine = LoadOnVulkan(model, c.cpu_moe_layers, c.rules);
    ASSERT_NE(engine, nullptr);
    ASSERT_EQ(engine->n_backends(), 2u);
    const DeviceMemoryPlan* plan = engine->device_plan();
    ASSERT_NE(plan, nullptr);
    const Placement& placement = engine->placement();
    const size_t planned = plan->DeviceWeightBytes(placement, 1);
    EXPECT_EQ(planned, engine->backend(1).WeightBytes())
        << "--n-cpu-moe " << c.cpu_moe_layers << " -ot " << c.rules << ": "
        << engine->PlacementString();
    // Every block runs on the device whatever its experts do (its KV cache is there), and the
    // experts are on the CPU: asked, or because the device does not run moe_ffn.
    const ModelWeights& weights = engine->model().weights;
    size_t cpu_weights = 0;
    for (size_t l = 0; l < placement.layers.size(); ++l) {
      EXPECT_EQ(placement.layers[l], 1) << engine->PlacementString();
      for (size_t i = 0; i < weights.layers[l].size(); ++i) {
        if (!weights.layers[l][i].data) continue;
        const bool expert = weights.layers[l].spec(i).kind == WeightKind::kExperts;
        if (expert) {
          EXPECT_EQ(placement.OfWeight(l, i), 0) << engine->PlacementString();
        }
        cpu_weights += placement.OfWeight(l, i) == 0 ? 1 : 0;
      }
    }
    if (c.rules.empty()) {
      if (all_bytes == 0) all_bytes = planned;
      EXPECT_EQ(planned, all_bytes) << "the same weights on the device";
    } else {
      // Block 0's attention weights are on the CPU too: fewer device bytes.
      EXPECT_LT(planned, all_bytes) << engine->PlacementString();
      EXPECT_GT(cpu_weights, 2 * 3u) << engine->PlacementString();
    }
  }
}

TEST(OffloadTest, BadPlacementsAreOneLineErrorsBeforeLoading) {
  SKIP_WITHOUT_VULKAN();
  const MoeModel model{"qwen3moe", "synth-arch"};
  auto run = [&](std::vector<std::string> placement) {
    std::vector<std::string> args = {"run", "-m", model.path(), "-p", "x", "-n", "1"};
    args.insert(args.end(), placement.begin(), placement.end());
    return Petrel(args);
  };
  ExpectOneLineError(run({"--device", "vulkan", "-ot", "exps=Vulkan7"}),
                     "tensor override 'exps=Vulkan7': vulkan:7 is not a device of this run");
  ExpectOneLineError(run({"--device", "vulkan", "-ot", "exps=cuda"}),
                     "is not a device of this run");
  ExpectOneLineError(run({"--device", "vulkan", "-ot", "attn_qkv=CPU"}),
                     "tensor override 'attn_qkv=CPU': the pattern matches no tensor of this model");
  ExpectOneLineError(run({"--device", "vulkan", "--tensor-split", "3,1"}),
                     "--tensor-split has 2 shares for 1 device");
  ExpectOneLineError(run({"--device", "vulkan,vulkan", "--tensor-split", "1,1,1"}),
                     "--tensor-split has 3 shares for 2 devices");
  ExpectOneLineError(run({"--device", "vulkan,vulkan", "--tensor-split", "1,0"}),
                     "every share must be positive");
  ExpectOneLineError(run({"--device", "vulkan,vulkan", "--tensor-split", "-1,2"}),
                     "every share must be positive");
}

}  // namespace
}  // namespace petrel
