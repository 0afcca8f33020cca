// Mixed CPU/device placement end to end (docs/OFFLOAD.md): the mixture-of-experts synthetic
// models (Qwen3-MoE, a Mixtral-style one written by `petrel synth`, gpt-oss) with every block
// and expert on the device, their experts on the CPU (--cpu-moe, --n-cpu-moe), tensor rules
// (-ot), and blocks split over two devices (--tensor-split: CPU + Vulkan, one Vulkan device
// opened twice, and lavapipe listed twice to the Vulkan loader as vulkan:0 and vulkan:1), each
// against the CPU-only logits and greedy text; where each tensor group went; the plan's device
// weight bytes against what the backend allocated; and the placement errors. Every test skips,
// saying why, without a Vulkan device.
#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
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
  std::string name;  // the key of golden/<set>/parity.json, or of a file written by the test
  std::string set;   // synth-arch or synth-arch2; empty: `file` is the model
  std::string file = "";
  std::string path() const {
    return set.empty() ? file : SharedDir() + "/models/" + set + "/" + name + ".gguf";
  }
  std::vector<int32_t> ids() const {
    if (set.empty()) return {1, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33};
    const nlohmann::json parity =
        testing::ReadJson(SharedDir() + "/golden/" + set + "/parity.json");
    return parity[name]["ids"].get<std::vector<int32_t>>();
  }
};

// Where this run writes its Mixtral-style model.
std::string MixtralStyleFile() {
  return testing::ScratchDir() + "/offload_test_mixtral_" + std::to_string(getpid()) + ".gguf";
}

// A Mixtral-style model (Llama attention, 4 experts without a shared one, softmax top-2
// renormalised) of random F32 weights, written once per run by `petrel synth --shape
// moe-tiny` and removed at exit; empty when that fails (the failure is reported).
std::string MixtralStylePath() {
  static const std::string path = [] {
    const std::string out = MixtralStyleFile();
    const Output run = Petrel({"synth", "--shape", "moe-tiny", "--type", "f32", "--n-vocab", "512",
                               "--seed", "7", "-o", out});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    if (run.exit_code != 0) return std::string();
    std::atexit([] { std::remove(MixtralStyleFile().c_str()); });
    return out;
  }();
  return path;
}

// The mixture-of-experts models there are: Qwen3-MoE, the Mixtral-style one, and gpt-oss
// (experts with biases and the clamped activation) when its synthetic file is present.
std::vector<MoeModel> MoeModels() {
  std::vector<MoeModel> models = {{"qwen3moe", "synth-arch"}};
  if (!MixtralStylePath().empty()) models.push_back({"mixtral-style", "", MixtralStylePath()});
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

// Lavapipe's ICD file, or "" when this machine has none.
std::string LavapipeIcd() {
  for (const char* dir :
       {"/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d"}) {
    std::error_code ignored;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ignored)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("lvp_icd", 0) == 0 && name.size() > 5 &&
          name.compare(name.size() - 5, 5, ".json") == 0) {
        return entry.path().string();
      }
    }
  }
  return "";
}

// Sets the Vulkan loader's driver list of the petrel processes started in its lifetime to
// lavapipe twice: the ICD file and a copy of it at another path (the loader merges one path
// listed twice, not two files), so `vulkan:0` and `vulkan:1` are two instances of lavapipe, each
// with its own device, memory and queue.
class TwoLavapipeDevices {
 public:
  TwoLavapipeDevices() {
    const std::string icd = LavapipeIcd();
    if (icd.empty()) return;
    copy_ = testing::ScratchDir() + "/offload_test_lvp_" + std::to_string(getpid()) + ".json";
    std::error_code error;
    std::filesystem::copy_file(icd, copy_, std::filesystem::copy_options::overwrite_existing,
                               error);
    if (error) return;
    const std::string list = icd + ":" + copy_;
    for (const char* name : {"VK_ICD_FILENAMES", "VK_DRIVER_FILES"}) {
      const char* old = std::getenv(name);
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      setenv(name, list.c_str(), 1);
    }
    ok_ = true;
  }
  ~TwoLavapipeDevices() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name, value->c_str(), 1);
      } else {
        unsetenv(name);
      }
    }
    if (!copy_.empty()) std::remove(copy_.c_str());
  }
  bool ok() const { return ok_; }

 private:
  std::string copy_;
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
  bool ok_ = false;
};

// Two Vulkan devices in one run: the blocks split over lavapipe listed twice (two devices to the
// loader, each block's KV cache on its own device), all experts on the devices or on the CPU,
// against the CPU-only logits and greedy text.
TEST(OffloadTest, TwoVulkanDevicesSplitTheBlocks) {
  SKIP_WITHOUT_VULKAN();
  TwoLavapipeDevices devices;
  if (!devices.ok()) GTEST_SKIP() << "skipped: no lavapipe ICD file to list twice";
  const Output listed = Petrel({"info", "--devices"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  if (listed.out.find("vulkan:1") == std::string::npos) {
    GTEST_SKIP() << "skipped: the Vulkan loader shows one device\n" << listed.out;
  }
  const std::vector<std::vector<std::string>> placements = {
      {"--device", "vulkan:0,vulkan:1", "--tensor-split", "1,1"},
      {"--device", "vulkan:0,vulkan:1", "--tensor-split", "1,3", "--cpu-moe"},
      {"--device", "vulkan:1,vulkan:0", "--tensor-split", "1,1", "-ncmoe", "1"},
  };
  for (const MoeModel& model : MoeModels()) {
    const std::vector<float> cpu = Logits(model, {});
    const std::string cpu_text = GreedyText(model, {});
    ASSERT_FALSE(cpu.empty()) << model.name;
    for (const auto& placement : placements) {
      const auto stats = CompareLogits(Logits(model, placement), cpu, 2048);
      EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance))
          << model.name << " " << Describe(placement) << ": " << stats.ToString();
      std::printf("%s %s: %s\n", model.name.c_str(), Describe(placement).c_str(),
                  stats.ToString().c_str());
      EXPECT_EQ(GreedyText(model, placement), cpu_text) << model.name << " " << Describe(placement);
    }
  }
  const Output split =
      Petrel({"-v", "run", "-m", MoeModel{"qwen3moe", "synth-arch"}.path(), "-p", "Once", "-n", "1",
              "--device", "vulkan:0,vulkan:1", "--tensor-split", "1,1"});
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
  // Each case keeps more on the CPU than the one before: fewer device bytes.
  size_t previous = SIZE_MAX;
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
    EXPECT_LT(planned, previous) << engine->PlacementString();
    previous = planned;
    // Every block runs on the device whatever its experts do (its KV cache is there); the
    // experts are on the CPU where asked, and on the device (which runs moe_ffn) otherwise.
    const ModelWeights& weights = engine->model().weights;
    for (size_t l = 0; l < placement.layers.size(); ++l) {
      EXPECT_EQ(placement.layers[l], 1) << engine->PlacementString();
      for (size_t i = 0; i < weights.layers[l].size(); ++i) {
        if (!weights.layers[l][i].data) continue;
        if (weights.layers[l].spec(i).kind == WeightKind::kExperts) {
          EXPECT_EQ(placement.OfWeight(l, i), l < c.cpu_moe_layers ? 0 : 1)
              << engine->PlacementString();
        }
      }
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
