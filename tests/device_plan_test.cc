// Choosing and checking what goes on a device, without one: `--device NAME:N` parsing and its
// index check, the device memory plan behind `--gpu-layers auto`, the check before uploading,
// a device running out of memory during the upload, `half`, and profiles collected by the engine.
// A `ref` backend dressed as a device with its own memory stands in for a GPU.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "core/runtime/backend_registry.h"
#include "core/runtime/engine.h"
#include "core/runtime/memory_plan.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::SharedDir;

std::string SynthF32() { return SharedDir() + "/models/synth-tiny/tiny-v2048-f32.gguf"; }

// What the fake device reports and tolerates; set by each test before loading.
size_t g_free_bytes = 0;        // FreeMemory()
size_t g_upload_limit = SIZE_MAX;  // PrepareWeight fails once this many bytes were uploaded

class SmallDevice final : public Backend {
 public:
  explicit SmallDevice(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const char* Name() const override { return "small"; }
  BackendId id() const override { return inner_->id(); }
  bool Supports(const Node& node) const override { return inner_->Supports(node); }
  bool SupportsKv(DType type) const override { return inner_->SupportsKv(type); }
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) override { return inner_->Allocate(bytes); }
  Result<TensorView> PrepareWeight(const TensorView& view) override {
    uploaded_ += view.desc.bytes();
    if (uploaded_ > g_upload_limit) return Error("out of device memory");
    return inner_->PrepareWeight(view);
  }
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
    if (profiling_) {
      OpProfile& op = profile_[size_t(node.op)];
      op.op = node.op;
      ++op.calls;
      op.seconds += 1e-6;
    }
    return inner_->Run(node, values, kv);
  }
  Status Submit() override { return inner_->Submit(); }
  size_t FreeMemory() const override { return g_free_bytes; }
  void EnableProfiling(bool enabled) override { profiling_ = enabled; }
  std::vector<OpProfile> TakeProfile() override {
    std::vector<OpProfile> out;
    for (auto& [kind, op] : profile_) out.push_back(op);
    profile_.clear();
    return out;
  }

 private:
  std::unique_ptr<Backend> inner_;
  size_t uploaded_ = 0;
  bool profiling_ = false;
  std::map<size_t, OpProfile> profile_;
};

void RegisterSmallDevice() {
  static const Status registered = RegisterBackend(
      {"small",
       [](BackendId id, const BackendOptions& options) -> Result<std::unique_ptr<Backend>> {
         PETREL_ASSIGN_OR_RETURN(std::unique_ptr<Backend> ref, CreateBackend("ref", id, options));
         return std::unique_ptr<Backend>(std::make_unique<SmallDevice>(std::move(ref)));
       },
       []() -> Result<std::vector<DeviceDescription>> {
         return std::vector<DeviceDescription>{{"small zero", "virtual", 1 << 30, ""},
                                               {"small one", "virtual", 1 << 30, ""}};
       }});
  ASSERT_TRUE(registered.ok()) << registered.message();
}

EngineOptions OnSmall(GpuLayerRule rule, size_t layers = 0) {
  EngineOptions options;
  options.n_threads = 2;
  options.context = 64;
  options.load_tokenizer = false;
  options.device = "small";
  options.device_layer_rule = rule;
  options.device_layers = layers;
  return options;
}

TEST(DeviceSpec, NameAndIndex) {
  auto plain = ParseDeviceSpec("vulkan");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->backend, "vulkan");
  EXPECT_EQ(plain->index, -1);
  auto indexed = ParseDeviceSpec("vulkan:1");
  ASSERT_TRUE(indexed.ok());
  EXPECT_EQ(indexed->backend, "vulkan");
  EXPECT_EQ(indexed->index, 1);
  for (const char* bad : {"vulkan:", "vulkan:x", "vulkan:-1", "vulkan:1x", "vulkan: 1"}) {
    EXPECT_FALSE(ParseDeviceSpec(bad).ok()) << bad;
  }
}

TEST(DeviceSpec, AnIndexPastTheDevicesListsThem) {
  RegisterSmallDevice();
  EXPECT_TRUE(CreateBackend("small:1", 1, BackendOptions{}).ok());
  auto missing = CreateBackend("small:5", 1, BackendOptions{});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "--device small:5: this machine has 2 Small devices (0: small zero, 1: small one)");
  EXPECT_TRUE(CreateBackend("ref:0", 1, BackendOptions{}).ok());
  auto host = CreateBackend("ref:1", 1, BackendOptions{});
  ASSERT_FALSE(host.ok());
  EXPECT_NE(host.status().message().find("only device 0"), std::string::npos) << host.status().message();
  EXPECT_NE(CreateBackend("warp:0", 1, BackendOptions{}).status().message().find("unknown device 'warp'"),
            std::string::npos);
}

TEST(DeviceMemoryPlan, FitsTheLastBlocksThatTheFreeMemoryHolds) {
  constexpr size_t kMiB = size_t(1) << 20;
  DeviceMemoryPlan plan;
  plan.layer_weight_bytes = {100 * kMiB, 100 * kMiB, 100 * kMiB, 100 * kMiB};
  plan.output_weight_bytes = 50 * kMiB;
  plan.kv_bytes_per_token = kMiB;
  plan.kv_tokens = 10;
  plan.activation_bytes = 30 * kMiB;
  EXPECT_EQ(plan.OffloadBytes(0), 0u);
  EXPECT_EQ(plan.OffloadBytes(1), 140 * kMiB);
  EXPECT_EQ(plan.OffloadBytes(4), 470 * kMiB);
  EXPECT_EQ(plan.OffloadBytes(5), 520 * kMiB);
  EXPECT_EQ(plan.FitLayers(size_t(1) << 40), 5u);  // every block and the head
  // Free memory that holds two blocks once the margin (64 MiB + 5 %) is kept, not three.
  const size_t two = (plan.OffloadBytes(2) + 64 * kMiB) * 20 / 19 + 20;
  EXPECT_GE(two - DeviceMemoryPlan::Margin(two), plan.OffloadBytes(2));
  EXPECT_EQ(plan.FitLayers(two), 2u);
  EXPECT_EQ(plan.FitLayers(plan.OffloadBytes(5)), 3u) << "the margin is kept";
  EXPECT_EQ(plan.FitLayers(0), 0u);
  // Only the blocks actually placed count (a block the device cannot run stays on the CPU).
  Placement placement = Placement::Offload(4, 1, 3);
  placement.layers[2] = 0;
  EXPECT_EQ(plan.DeviceBytes(placement, 1), 250 * kMiB);
}

// Free memory for which `auto` places exactly `layers` blocks of `plan`.
size_t FreeFor(const DeviceMemoryPlan& plan, size_t layers) {
  size_t free = plan.OffloadBytes(layers);
  while (plan.FitLayers(free) < layers) free += free / 64 + 1;
  return free;
}

TEST(GpuLayers, AutoPlacesWhatTheFreeMemoryHolds) {
  RegisterSmallDevice();
  g_free_bytes = size_t(1) << 40;
  g_upload_limit = SIZE_MAX;
  auto all = Engine::Load(SynthF32(), OnSmall(GpuLayerRule::kAuto));
  ASSERT_TRUE(all.ok()) << all.status().message();
  const size_t n_layers = size_t((*all)->config().n_layers);
  EXPECT_EQ((*all)->options().device_layers, n_layers + 1);
  ASSERT_NE((*all)->device_plan(), nullptr);
  const DeviceMemoryPlan plan = *(*all)->device_plan();
  EXPECT_EQ(plan.n_layers(), n_layers);
  EXPECT_GT(plan.activation_bytes, 0u);
  EXPECT_GT(plan.kv_bytes_per_token, 0u);

  g_free_bytes = FreeFor(plan, 2);
  ASSERT_EQ(plan.FitLayers(g_free_bytes), 2u);
  auto two = Engine::Load(SynthF32(), OnSmall(GpuLayerRule::kAuto));
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ((*two)->options().device_layers, 2u);
  const std::string placement = (*two)->PlacementString();
  EXPECT_EQ(placement, "layers 0-" + std::to_string(n_layers - 3) + ": cpu, layers " +
                           std::to_string(n_layers - 2) + "-" + std::to_string(n_layers - 1) +
                           ": small, output: cpu");

  // Nothing fits: everything on the CPU, and the device is not kept.
  g_free_bytes = 1;
  auto none = Engine::Load(SynthF32(), OnSmall(GpuLayerRule::kAuto));
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ((*none)->options().device_layers, 0u);
  EXPECT_EQ((*none)->device_plan(), nullptr);
}

TEST(GpuLayers, HalfIsHalfTheBlocks) {
  RegisterSmallDevice();
  g_free_bytes = size_t(1) << 40;
  g_upload_limit = SIZE_MAX;
  auto engine = Engine::Load(SynthF32(), OnSmall(GpuLayerRule::kHalf));
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  const size_t n_layers = size_t((*engine)->config().n_layers);
  EXPECT_EQ((*engine)->options().device_layers, n_layers / 2);
  EXPECT_EQ((*engine)->placement().output, 0);
  EXPECT_EQ((*engine)->placement().layers.front(), 0);
  EXPECT_EQ((*engine)->placement().layers.back(), 1);
}

TEST(GpuLayers, ACountTheDeviceCannotHoldIsRefusedBeforeUploading) {
  RegisterSmallDevice();
  g_free_bytes = size_t(1) << 40;
  g_upload_limit = SIZE_MAX;
  auto all = Engine::Load(SynthF32(), OnSmall(GpuLayerRule::kAll));
  ASSERT_TRUE(all.ok()) << all.status().message();
  const DeviceMemoryPlan plan = *(*all)->device_plan();
  g_free_bytes = plan.OffloadBytes(plan.n_layers() + 1) - 1;
  g_upload_limit = 0;  // an upload would fail: the check must come first
  auto refused = Engine::Load(SynthF32(), OnSmall(GpuLayerRule::kAll));
  ASSERT_FALSE(refused.ok());
  const std::string message = refused.status().message();
  EXPECT_NE(message.find("and the output head on small need"), std::string::npos) << message;
  EXPECT_NE(message.find("use a smaller --gpu-layers (auto would place 0)"), std::string::npos)
      << message;
}

TEST(GpuLayers, RunningOutOfDeviceMemoryWhileUploadingNamesTheLayer) {
  RegisterSmallDevice();
  g_free_bytes = size_t(1) << 40;
  g_upload_limit = SIZE_MAX;
  auto all = Engine::Load(SynthF32(), OnSmall(GpuLayerRule::kAll));
  ASSERT_TRUE(all.ok()) << all.status().message();
  const DeviceMemoryPlan plan = *(*all)->device_plan();
  const size_t n_layers = plan.n_layers();
  // The output head goes first, then the blocks in order: room for the head and two blocks.
  g_upload_limit = plan.output_weight_bytes + plan.layer_weight_bytes[0] + plan.layer_weight_bytes[1];
  auto failed = Engine::Load(SynthF32(), OnSmall(GpuLayerRule::kAll));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message().rfind("layer 2 on small: out of device memory; try a smaller --gpu-layers", 0),
            0u)
      << failed.status().message();
  EXPECT_GT(n_layers, 2u);
}

TEST(Profiling, TheEngineCollectsEachBackendsOpTimes) {
  RegisterSmallDevice();
  g_free_bytes = size_t(1) << 40;
  g_upload_limit = SIZE_MAX;
  auto engine = Engine::Load(SynthF32(), OnSmall(GpuLayerRule::kAll));
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  std::vector<float> logits;
  ASSERT_TRUE((*engine)->Prefill((*engine)->NewSequence(), {1, 5, 9}, false, &logits).ok());
  EXPECT_TRUE((*engine)->TakeProfile().empty()) << "nothing is measured until profiling is on";
  (*engine)->EnableProfiling(true);
  ASSERT_TRUE((*engine)->Prefill((*engine)->NewSequence(), {1, 5, 9}, false, &logits).ok());
  const auto profiles = (*engine)->TakeProfile();
  ASSERT_EQ(profiles.size(), 1u);
  EXPECT_EQ(profiles[0].backend, "small");
  size_t attention_calls = 0;
  for (const OpProfile& op : profiles[0].ops) {
    if (op.op == OpKind::kAttention) attention_calls = op.calls;
  }
  EXPECT_EQ(attention_calls, size_t((*engine)->config().n_layers));
  EXPECT_TRUE((*engine)->TakeProfile().empty()) << "TakeProfile resets";
}

}  // namespace
}  // namespace petrel
