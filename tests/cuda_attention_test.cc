// The CUDA attention kernels on a device: the KV write against the host conversion (the CPU
// backend's bytes, checked in cuda_attention_math_test), and both the split-K decode and the
// tiled prefill kernel, whatever the batch size, against the `ref` backend's attention. Without a
// device the device tests skip with the reason; the argument checks run everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/attention/attention.h"
#include "cuda/attention/attention_kernels.h"  // LaunchSplitKDecode, LaunchTiledPrefill
#include "cuda/attention/attention_math.cuh"
#include "util/paged_attention_case.h"

namespace petrel::cuda {
namespace {

using attn::KvKind;
using test::AttentionCase;
using test::Batch;

// On the device, f32 sums run in other orders (lane partials, butterflies, fused multiply-adds)
// than the host emulation, whose largest error against the reference is below 1e-6.
constexpr float kDeviceTolerance = 2e-5f;

// Why device tests cannot run here, or empty when a device is usable.
std::string NoDeviceReason() {
  int n_devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&n_devices);
  if (error != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(error);
  if (n_devices == 0) return "no CUDA device";
  return "";
}

// Device memory freed at scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    if (bytes > 0 && cudaMalloc(&data_, bytes) != cudaSuccess) data_ = nullptr;
  }
  template <typename T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    if (data_) cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  template <typename T>
  std::vector<T> Download(size_t n) const {
    std::vector<T> host(n);
    cudaMemcpy(host.data(), data_, n * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  void* data_ = nullptr;
};

DType DTypeOfKind(KvKind kind) { return test::DTypeOf(kind); }

class CudaAttentionTest : public ::testing::TestWithParam<AttentionCase> {
 protected:
  void SetUp() override {
    const std::string reason = NoDeviceReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
};

TEST_P(CudaAttentionTest, KvWriteThenBothKernelsMatchReference) {
  const AttentionCase& c = GetParam();
  const Batch b = test::MakeBatch(c, 99);
  const std::vector<float> want = test::Reference(c, b);

  DeviceBuffer q(b.q), k(b.k), v(b.v), kv_slot(b.kv_slot), n_ctx(b.n_ctx), token_seq(b.token_seq),
      block_tables(b.block_tables), block_table_begin(b.block_table_begin),
      k_cache(b.k_cache_before), v_cache(b.v_cache_before), out(b.q.size() * sizeof(float));
  AttentionArgs args;
  args.params = {.n_heads = c.n_heads,
                 .n_kv_heads = c.n_kv_heads,
                 .head_dim = c.head_dim,
                 .scale = c.scale,
                 .logit_softcap = c.softcap,
                 .window = c.window};
  args.n_tokens = b.n_tokens;
  args.max_ctx = b.max_ctx;
  args.kv_type = DTypeOfKind(c.kind);
  args.block_tokens = c.block_tokens;
  args.k_cache = k_cache.as<void>();
  args.v_cache = v_cache.as<void>();
  args.q = q.as<const float>();
  args.k = k.as<const float>();
  args.v = v.as<const float>();
  args.out = out.as<float>();
  args.kv_slot = kv_slot.as<const int32_t>();
  args.n_ctx = n_ctx.as<const int32_t>();
  args.token_seq = token_seq.as<const int32_t>();
  args.block_tables = block_tables.as<const int32_t>();
  args.block_table_begin = block_table_begin.as<const int32_t>();
  // Scratch for split-K at this batch's size, whether or not LaunchAttention would choose it.
  const size_t scratch_bytes =
      size_t(attn::DecodeScratchFloats(b.n_tokens, c.n_heads, b.max_ctx, c.head_dim)) *
      sizeof(float);
  DeviceBuffer scratch(scratch_bytes);
  args.scratch = scratch.as<void>();
  args.scratch_bytes = scratch_bytes;
  ASSERT_NE(args.scratch, nullptr);

  ASSERT_EQ(LaunchKvWrite(nullptr, args), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(k_cache.Download<uint8_t>(b.k_cache.size()) == b.k_cache) << "K cache bytes";
  EXPECT_TRUE(v_cache.Download<uint8_t>(b.v_cache.size()) == b.v_cache) << "V cache bytes";

  const struct {
    const char* name;
    cudaError_t (*launch)(cudaStream_t, const AttentionArgs&, attn::KvKind);
  } kernels[] = {{"split-K decode", LaunchSplitKDecode}, {"tiled prefill", LaunchTiledPrefill}};
  for (const auto& kernel : kernels) {
    cudaMemset(args.out, 0xff, b.q.size() * sizeof(float));  // NaN where nothing is written
    ASSERT_EQ(kernel.launch(nullptr, args, KvKindOf(args.kv_type)), cudaSuccess) << kernel.name;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << kernel.name;
    const float error = test::MaxError(out.Download<float>(b.q.size()), want);
    EXPECT_LE(error, kDeviceTolerance) << kernel.name;
    std::printf("  %s %s: %d tokens, max error %.3g\n", c.name.c_str(), kernel.name, b.n_tokens,
                error);
  }
  // And the dispatch.
  ASSERT_EQ(LaunchAttention(nullptr, args), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LE(test::MaxError(out.Download<float>(b.q.size()), want), kDeviceTolerance);
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaAttentionTest, ::testing::ValuesIn(test::PagedAttentionCases()),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           return info.param.name;
                         });

// --- Without a device -----------------------------------------------------------------------

AttentionParams Params(int n_heads, int n_kv_heads, int head_dim) {
  return {.n_heads = n_heads,
          .n_kv_heads = n_kv_heads,
          .head_dim = head_dim,
          .scale = 1.0f,
          .logit_softcap = 0.0f,
          .window = 0};
}

TEST(CudaAttentionArgs, SupportsHeadsUpTo256AndTheThreeCacheTypes) {
  EXPECT_TRUE(SupportsAttention(Params(32, 8, 128), DType::kF16));
  EXPECT_TRUE(SupportsAttention(Params(8, 1, 256), DType::kQ8_0));
  EXPECT_TRUE(SupportsAttention(Params(6, 3, 80), DType::kF32));
  EXPECT_FALSE(SupportsAttention(Params(6, 3, 80), DType::kQ8_0));  // heads of whole blocks
  EXPECT_FALSE(SupportsAttention(Params(8, 8, 512), DType::kF16));
  EXPECT_FALSE(SupportsAttention(Params(6, 4, 64), DType::kF16));  // not a GQA grouping
  EXPECT_FALSE(SupportsAttention(Params(8, 8, 64), DType::kBF16));
  AttentionParams negative_window = Params(8, 8, 64);
  negative_window.window = -1;
  EXPECT_FALSE(SupportsAttention(negative_window, DType::kF32));
}

TEST(CudaAttentionArgs, ScratchOnlyForSplitKBatches) {
  AttentionArgs args;
  args.params = Params(32, 8, 128);
  args.max_ctx = 4096;
  args.n_tokens = 1;
  // 16 chunks of 256 positions, each 128 outputs plus max and sum.
  EXPECT_EQ(AttentionScratchBytes(args), size_t(32 * 16 * 130 * 4));
  args.n_tokens = attn::kDecodeMaxTokens + 1;
  EXPECT_EQ(AttentionScratchBytes(args), 0u);
}

TEST(CudaAttentionArgs, BadArgumentsAreErrorsNotCrashes) {
  AttentionArgs args;
  args.params = Params(8, 8, 512);
  args.n_tokens = 1;
  args.block_tokens = 16;
  EXPECT_EQ(LaunchAttention(nullptr, args), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchKvWrite(nullptr, args), cudaErrorInvalidValue);
  args.params = Params(8, 8, 64);
  EXPECT_EQ(LaunchAttention(nullptr, args), cudaErrorInvalidValue);  // null pointers
  EXPECT_EQ(LaunchKvWrite(nullptr, args), cudaErrorInvalidValue);
  // Every pointer set (never dereferenced: the checks come first), but no scratch for split-K.
  float dummy[4] = {};
  int32_t dummy_ints[4] = {};
  args.max_ctx = 100;
  args.k_cache = args.v_cache = dummy;
  args.q = args.k = args.v = args.out = dummy;
  args.kv_slot = args.n_ctx = args.token_seq = args.block_tables = args.block_table_begin =
      dummy_ints;
  EXPECT_EQ(LaunchAttention(nullptr, args), cudaErrorInvalidValue);
  args.n_tokens = 0;
  EXPECT_EQ(LaunchAttention(nullptr, args), cudaSuccess);  // nothing to do
  EXPECT_EQ(LaunchKvWrite(nullptr, args), cudaSuccess);
}

}  // namespace
}  // namespace petrel::cuda
