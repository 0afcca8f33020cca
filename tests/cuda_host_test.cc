// The CUDA backend's host-side logic, on any machine that builds it (a GPU is not needed): the
// caching allocator over fake memory, the one-copy batch layout, `--device cuda[:N]` parsing and
// naming, placement and the memory plan for a CUDA device through the shared code, and, where
// there is no driver or device, the one-line "no CUDA device" error of the backend, the engine and
// `petrel` (while `petrel info --devices` still succeeds and says why).
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model/loader.h"
#include "core/runtime/backend_registry.h"
#include "core/runtime/engine.h"
#include "core/runtime/memory_plan.h"
#include "cuda/batch_arrays.h"
#include "cuda/cublas_loader.h"
#include "cuda/device_memory.h"
#include "util/cli_runner.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::ExpectOneLineError;
using testing::Output;
using testing::Petrel;
using testing::SharedDir;

std::string Story() { return SharedDir() + "/models/story-gguf/story-f32.gguf"; }

// Whether this machine has a CUDA device (then the "no device" tests do not apply).
bool HasCudaDevice() {
  const BackendFactory* cuda = FindBackend("cuda");
  if (cuda == nullptr) return false;
  auto devices = cuda->list_devices();
  return devices.ok() && !devices->empty();
}

#define SKIP_WITH_A_DEVICE() \
  if (HasCudaDevice()) GTEST_SKIP() << "skipped: this machine has a CUDA device"

// Host memory standing in for the device: counts the calls, fails past a limit.
class FakeMemory final : public cuda::RawMemory {
 public:
  explicit FakeMemory(size_t limit, size_t* in_use_after = nullptr)
      : limit_(limit), in_use_after_(in_use_after) {}
  ~FakeMemory() override {
    if (in_use_after_) *in_use_after_ = in_use_;
  }
  Result<void*> Allocate(size_t bytes) override {
    if (in_use_ + bytes > limit_) return Error("out of fake memory");
    in_use_ += bytes;
    ++allocations_;
    void* ptr = std::malloc(bytes);
    sizes_[ptr] = bytes;
    return ptr;
  }
  void Free(void* ptr) override {
    in_use_ -= sizes_.at(ptr);
    sizes_.erase(ptr);
    ++frees_;
    std::free(ptr);
  }
  size_t in_use_ = 0, allocations_ = 0, frees_ = 0;

 private:
  size_t limit_;
  size_t* in_use_after_;  // where the bytes still in use are reported on destruction
  std::map<void*, size_t> sizes_;
};

TEST(CudaAllocator, BucketsRoundUpWithBoundedWaste) {
  EXPECT_EQ(cuda::BucketBytes(0), 256u);
  EXPECT_EQ(cuda::BucketBytes(1), 256u);
  EXPECT_EQ(cuda::BucketBytes(257), 512u);
  EXPECT_EQ(cuda::BucketBytes(size_t(1) << 20), size_t(1) << 20);
  EXPECT_EQ(cuda::BucketBytes((size_t(1) << 20) + 1), size_t(2) << 20);
  EXPECT_EQ(cuda::BucketBytes((size_t(5) << 20) + 1), size_t(6) << 20);
  for (size_t bytes = 1; bytes < (size_t(64) << 20); bytes = bytes * 3 + 7) {
    const size_t bucket = cuda::BucketBytes(bytes);
    EXPECT_GE(bucket, bytes);
    EXPECT_LE(bucket - bytes, std::max(bytes, size_t(2) << 20)) << bytes;
  }
  EXPECT_EQ(cuda::BucketBytes(SIZE_MAX - 5), SIZE_MAX) << "no overflow";
}

TEST(CudaAllocator, ReusesFreedBlocksAndReleasesThemAtTheEnd) {
  size_t in_use_at_the_end = 1;
  auto owned = std::make_unique<FakeMemory>(size_t(1) << 30, &in_use_at_the_end);
  FakeMemory& raw = *owned;
  {
    cuda::CachingAllocator allocator(std::move(owned));
    auto a = cuda::DeviceBuffer::Make(allocator, 1000);
    ASSERT_TRUE(a.ok());
    void* first = (*a)->data();
    EXPECT_EQ((*a)->bytes(), 1000u);
    a->reset();
    EXPECT_EQ(allocator.cached_bytes(), 1024u);
    auto b = cuda::DeviceBuffer::Make(allocator, 900);  // same bucket: the same block
    ASSERT_TRUE(b.ok());
    EXPECT_EQ((*b)->data(), first);
    EXPECT_EQ(raw.allocations_, 1u);
    auto c = cuda::DeviceBuffer::Make(allocator, 3000);  // another bucket: a new block
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(raw.allocations_, 2u);
    // Weights are exact (to 256 bytes) and go straight back.
    auto w = cuda::DeviceBuffer::MakeLasting(allocator, (size_t(3) << 20) + 1);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(raw.in_use_, 1024u + 4096u + (size_t(3) << 20) + 256u);
    w->reset();
    EXPECT_EQ(raw.frees_, 1u);
    b->reset();
    c->reset();
    EXPECT_EQ(allocator.live_bytes(), 0u);
    EXPECT_EQ(raw.in_use_, 1024u + 4096u) << "cached, not freed";
  }
  EXPECT_EQ(in_use_at_the_end, 0u) << "the allocator frees its cache when destroyed";
}

TEST(CudaAllocator, RetriesOnceAfterReleasingTheCache) {
  auto owned = std::make_unique<FakeMemory>(size_t(4) << 20);
  FakeMemory& raw = *owned;
  cuda::CachingAllocator allocator(std::move(owned));
  auto a = cuda::DeviceBuffer::Make(allocator, size_t(3) << 20);  // a 4 MiB bucket
  ASSERT_TRUE(a.ok());
  a->reset();
  // 2 MiB do not fit next to the cached 4 MiB; releasing the cache makes room.
  auto b = cuda::DeviceBuffer::Make(allocator, size_t(2) << 20);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(allocator.cached_bytes(), 0u);
  EXPECT_EQ(raw.in_use_, size_t(2) << 20);
  auto too_big = cuda::DeviceBuffer::Make(allocator, size_t(8) << 20);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().message(), "out of fake memory");
}

TEST(CudaBatch, OneArrayHoldsEveryBatchArrayAligned) {
  const std::vector<int32_t> tokens = {5, 6, 7}, positions = {0, 1, 9}, token_seq = {0, 0, 1},
                             tables = {3, 4, 8}, begin = {0, 2, 3}, n_ctx = {1, 2, 10},
                             kv_slot = {48, 49, 137}, selected = {1, 2};
  BatchContext batch;
  batch.n_tokens = 3;
  batch.tokens = tokens.data();
  batch.positions = positions.data();
  batch.n_seqs = 2;
  batch.token_seq = token_seq.data();
  batch.block_tables = tables.data();
  batch.block_table_begin = begin.data();
  batch.n_ctx = n_ctx.data();
  batch.kv_slot = kv_slot.data();
  batch.max_ctx = 10;
  batch.selected_rows = selected.data();
  batch.n_selected = 2;
  std::vector<int32_t> packed;
  const cuda::BatchLayout layout = cuda::PackBatch(batch, &packed);
  EXPECT_EQ(packed.size(), layout.total);
  const cuda::DeviceBatch d = cuda::PointersInto(packed.data(), layout);
  // The host vector is only 4-byte aligned; offsets are what must be multiples of 64 elements.
  const int32_t* base = packed.data();
  auto rebased = [&](const int32_t* p) { return p - base; };
  for (const int32_t* p : {d.tokens, d.positions, d.token_seq, d.block_tables, d.block_table_begin,
                           d.n_ctx, d.kv_slot, d.selected_rows}) {
    EXPECT_EQ(rebased(p) % 64, 0);
  }
  EXPECT_EQ(std::vector<int32_t>(d.tokens, d.tokens + 3), tokens);
  EXPECT_EQ(std::vector<int32_t>(d.positions, d.positions + 3), positions);
  EXPECT_EQ(std::vector<int32_t>(d.token_seq, d.token_seq + 3), token_seq);
  EXPECT_EQ(std::vector<int32_t>(d.block_tables, d.block_tables + 3), tables);
  EXPECT_EQ(std::vector<int32_t>(d.block_table_begin, d.block_table_begin + 3), begin);
  EXPECT_EQ(std::vector<int32_t>(d.n_ctx, d.n_ctx + 3), n_ctx);
  EXPECT_EQ(std::vector<int32_t>(d.kv_slot, d.kv_slot + 3), kv_slot);
  EXPECT_EQ(std::vector<int32_t>(d.selected_rows, d.selected_rows + 2), selected);

  // A batch without block tables (no attention) packs without them.
  BatchContext plain = batch;
  plain.block_tables = nullptr;
  plain.block_table_begin = nullptr;
  const cuda::BatchLayout small = cuda::PackBatch(plain, &packed);
  EXPECT_EQ(small.block_tables, small.block_table_begin);
  EXPECT_LT(small.total, layout.total);
}

TEST(CudaDevice, SpecParsingAndNaming) {
  ASSERT_NE(FindBackend("cuda"), nullptr) << "this build has the cuda backend";
  auto plain = ParseDeviceSpec("cuda");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->backend, "cuda");
  EXPECT_EQ(plain->index, -1);
  auto indexed = ParseDeviceSpec("cuda:3");
  ASSERT_TRUE(indexed.ok());
  EXPECT_EQ(indexed->backend, "cuda");
  EXPECT_EQ(indexed->index, 3);
  for (const char* bad : {"cuda:", "cuda:x", "cuda:-1"})
    EXPECT_FALSE(ParseDeviceSpec(bad).ok()) << bad;
  EXPECT_EQ(DeviceKindName("cuda"), "CUDA");
  const std::vector<std::string> names = AvailableBackends();
  EXPECT_NE(std::find(names.begin(), names.end(), "cuda"), names.end());
}

TEST(CudaDevice, PlacementAndMemoryPlanGoThroughTheSharedCode) {
  // The plan is the model's sizes, whatever the device; `auto` takes its free memory as input.
  auto model = LoadModel(Story());
  ASSERT_TRUE(model.ok()) << model.status().message();
  const size_t n_layers = size_t((*model)->config.n_layers);
  KvCacheOptions kv;
  kv.dtype = DType::kF16;
  kv.context = 256;
  kv.n_blocks = (kv.context + kv.block_tokens - 1) / kv.block_tokens;
  auto plan = PlanDeviceMemory(**model, kv, 64);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->n_layers(), n_layers);
  EXPECT_EQ(plan->FitLayers(size_t(80) << 30), n_layers + 1) << "an 80 GiB GPU holds it all";
  EXPECT_EQ(plan->FitLayers(0), 0u);
  const Placement half = Placement::Offload(n_layers, 1, n_layers / 2);
  EXPECT_NE(half.Describe({"cpu", "cuda"}).find(": cuda, output: cpu"), std::string::npos)
      << half.Describe({"cpu", "cuda"});
  EXPECT_EQ(Placement::Offload(n_layers, 1, n_layers + 1).Describe({"cpu", "cuda"}),
            "layers 0-" + std::to_string(n_layers - 1) + ": cuda, output: cuda");
}

// cuBLAS is opened on demand (not linked): the toolkit that built petrel has it, and the
// forwarders reach the library's functions once it is open.
TEST(CudaCublas, OpensOnDemandAndForwards) {
  const Status loaded = cuda::LoadCublas();
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  const std::string message = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
  EXPECT_NE(message, "cuBLAS is not loaded");
  EXPECT_FALSE(message.empty());
  EXPECT_EQ(std::string(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE)),
            "CUBLAS_STATUS_INVALID_VALUE");
}

TEST(CudaNoDevice, BackendAndEngineFailWithOneLine) {
  SKIP_WITH_A_DEVICE();
  for (const char* device : {"cuda", "cuda:0", "cuda:1"}) {
    auto backend = CreateBackend(device, 1, BackendOptions{});
    ASSERT_FALSE(backend.ok()) << device;
    const std::string message = backend.status().message();
    EXPECT_EQ(message.rfind("no CUDA device: ", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EngineOptions options;
  options.n_threads = 2;
  options.context = 64;
  options.device = "cuda";
  options.device_layer_rule = GpuLayerRule::kAll;
  auto engine = Engine::Load(Story(), options);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("no CUDA device"), std::string::npos)
      << engine.status().message();
}

TEST(CudaNoDevice, PetrelSaysSoInOneLineAndRunsOnTheCpuWithoutDevice) {
  SKIP_WITH_A_DEVICE();
  const Output devices = Petrel({"info", "--devices"});
  EXPECT_EQ(devices.exit_code, 0) << devices.err;
  EXPECT_NE(devices.out.find("cuda     unavailable: no CUDA device: "), std::string::npos)
      << devices.out;
  EXPECT_NE(devices.out.find("cpu      host"), std::string::npos) << devices.out;
  for (const char* device : {"cuda", "cuda:0", "cuda:2"}) {
    ExpectOneLineError(Petrel({"run", "-m", Story(), "-p", "x", "-n", "2", "--device", device}),
                       "no CUDA device: ");
  }
  ExpectOneLineError(Petrel({"info", "-m", Story(), "--device", "cuda", "--gpu-layers", "auto"}),
                     "no CUDA device: ");
  ExpectOneLineError(Petrel({"run", "-m", Story(), "-p", "x", "--device", "cuda:x"}),
                     "--device: 'cuda:x' is not a device");
  // Without --device nothing touches the driver: the CPU runs as in any build.
  const Output cpu =
      Petrel({"run", "-m", Story(), "-p", "Once upon a time", "-n", "4", "--temp", "0", "-t", "2"});
  EXPECT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_FALSE(cpu.out.empty());
}

}  // namespace
}  // namespace petrel
