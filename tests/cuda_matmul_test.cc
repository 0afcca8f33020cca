// The CUDA weight kernels (src/cuda/matmul): scratch sizing and argument checks on any machine;
// on a GPU, every weight type's mat_mul (matrix-vector and cuBLAS paths) against a double
// reference, batch invariance, and embedding rows bit for bit against the dequantizers. The
// device tests skip, saying why, where there is no CUDA device.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/matmul/blocks.cuh"
#include "cuda/matmul/matmul.h"
#include "gtest/gtest.h"
#include "quant/f16.h"
#include "quant/quantize.h"
#include "quant/types.h"
#include "util/random_blocks.h"

namespace petrel::cuda {
namespace {

const DType kWeightTypes[] = {
    DType::kF32,    DType::kF16,    DType::kBF16,    DType::kQ4_0,  DType::kQ4_1,  DType::kQ5_0,
    DType::kQ5_1,   DType::kQ8_0,   DType::kQ2_K,    DType::kQ3_K,  DType::kQ4_K,  DType::kQ5_K,
    DType::kQ6_K,   DType::kIQ4_NL, DType::kIQ4_XS,  DType::kIQ1_S, DType::kIQ1_M, DType::kIQ2_XXS,
    DType::kIQ2_XS, DType::kIQ2_S,  DType::kIQ3_XXS, DType::kIQ3_S, DType::kTQ1_0, DType::kTQ2_0,
    DType::kMXFP4,  DType::kQ1_0,   DType::kQ2_0};

bool IsFloat(DType type) {
  return type == DType::kF32 || type == DType::kF16 || type == DType::kBF16;
}

// ---- Host side: no device needed ----

TEST(CudaMatMulHostTest, EveryLoadableWeightTypeHasKernels) {
  for (DType type : kWeightTypes) EXPECT_TRUE(HasWeightKernels(type)) << DTypeName(type);
  for (DType type : {DType::kQ8_1, DType::kQ8_K, DType::kI8, DType::kI32, DType::kF64}) {
    EXPECT_FALSE(HasWeightKernels(type)) << DTypeName(type);
  }
}

TEST(CudaMatMulHostTest, ScratchIsBoundedByATileNotTheMatrix) {
  const int64_t n_rows = 14336, n_cols = 4096;
  // Few tokens: one 8-bit block (40 bytes) per 32 activations; floats need none.
  EXPECT_EQ(MatMulScratchBytes(DType::kQ4_0, n_rows, n_cols, 1), size_t(n_cols / 32 * 40));
  EXPECT_EQ(MatMulScratchBytes(DType::kQ6_K, n_rows, n_cols, 8), size_t(8 * n_cols / 32 * 40));
  EXPECT_EQ(MatMulScratchBytes(DType::kF16, n_rows, n_cols, 8), 0u);
  EXPECT_EQ(MatMulScratchBytes(DType::kF32, n_rows, n_cols, 512), 0u);
  // Many tokens: x as F16 plus at most a 32 MiB F16 tile of W, far below W in F16 (117 MB).
  for (DType type : {DType::kQ4_0, DType::kQ4_K, DType::kIQ4_XS}) {
    const size_t bytes = MatMulScratchBytes(type, n_rows, n_cols, 512);
    EXPECT_GE(bytes, size_t(512 * n_cols * 2)) << DTypeName(type);
    EXPECT_LE(bytes, size_t(512 * n_cols * 2) + (size_t(32) << 20) + 256) << DTypeName(type);
    // Also enough for the matrix-vector path, so the batch-invariant switch needs no more.
    EXPECT_GE(bytes, MatMulScratchBytes(type, n_rows, n_cols, 8)) << DTypeName(type);
  }
  EXPECT_EQ(MatMulScratchBytes(DType::kBF16, n_rows, n_cols, 100), size_t(100 * n_cols * 2));
  EXPECT_EQ(MatMulScratchBytes(DType::kQ8_K, n_rows, n_cols, 1), 0u);
  EXPECT_EQ(MatMulScratchBytes(DType::kQ4_0, n_rows, n_cols, 0), 0u);
}

// Bad arguments come back as cudaErrorInvalidValue before anything is launched (so these run
// without a device, on null pointers).
TEST(CudaMatMulHostTest, BadArgumentsAreRejectedBeforeAnyLaunch) {
  const size_t q4_row = *RowBytes(DType::kQ4_0, 64);
  auto launch = [](DType type, size_t row_bytes, int64_t n_cols, int64_t n_tokens,
                   size_t scratch_bytes) {
    return LaunchMatMul(nullptr, nullptr, type, nullptr, row_bytes, 4, n_cols, nullptr, n_tokens,
                        nullptr, nullptr, nullptr, scratch_bytes);
  };
  EXPECT_EQ(launch(DType::kQ8_K, 292, 256, 1, 1 << 20), cudaErrorInvalidValue);
  EXPECT_EQ(launch(DType::kI32, 4, 1, 1, 1 << 20), cudaErrorInvalidValue);
  EXPECT_EQ(launch(DType::kQ4_0, q4_row, 48, 1, 1 << 20), cudaErrorInvalidValue);  // part block
  EXPECT_EQ(launch(DType::kQ4_0, q4_row - 2, 64, 1, 1 << 20), cudaErrorInvalidValue);
  EXPECT_EQ(launch(DType::kQ4_0, q4_row, 64, 1, 79), cudaErrorInvalidValue);  // needs 80
  EXPECT_EQ(launch(DType::kQ4_0, q4_row, 64, 9, 80 * 8), cudaErrorInvalidValue);
  EXPECT_EQ(launch(DType::kF32, 4 * 64 + 2, 64, 1, 0), cudaErrorInvalidValue);  // misaligned rows
  EXPECT_EQ(launch(DType::kQ4_0, q4_row, 64, -1, 1 << 20), cudaErrorInvalidValue);
  EXPECT_EQ(launch(DType::kQ4_0, q4_row, 64, 0, 0), cudaSuccess);  // nothing to do
  EXPECT_EQ(LaunchEmbedRows(nullptr, DType::kQ8_1, nullptr, 36, 32, nullptr, 1, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchEmbedRows(nullptr, DType::kQ4_K, nullptr, 144, 128, nullptr, 1, nullptr),
            cudaErrorInvalidValue);
}

TEST(CudaMatMulHostTest, BatchInvariantSwitch) {
  EXPECT_FALSE(BatchInvariant());
  SetBatchInvariant(true);
  EXPECT_TRUE(BatchInvariant());
  SetBatchInvariant(false);
  EXPECT_FALSE(BatchInvariant());
}

// ---- Device ----

// Device memory freed on destruction.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) {
    if (n > 0 && cudaMalloc(&data_, n * sizeof(T)) != cudaSuccess) data_ = nullptr;
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    if (data_) cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return data_; }
  std::vector<T> ToHost(size_t n) const {
    std::vector<T> host(n);
    cudaMemcpy(host.data(), data_, n * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  T* data_ = nullptr;
};

class CudaMatMulDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device: "
                   << (error != cudaSuccess ? cudaGetErrorString(error) : "none found");
    }
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    ASSERT_EQ(cublasCreate(&cublas_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (cublas_) cublasDestroy(cublas_);
    if (stream_) cudaStreamDestroy(stream_);
    SetBatchInvariant(false);
  }

  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
};

// A random weight matrix (n_rows, n_cols) of `type`: its bytes and its values as the CPU decodes
// them. Rows of a type without a plain quantizer (the IQ1-IQ3 codebook formats) are random blocks.
struct Weights {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  size_t row_bytes = 0;
};

Weights RandomWeights(DType type, int64_t n_rows, int64_t n_cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 0.05f);
  Weights w;
  w.row_bytes = *RowBytes(type, uint64_t(n_cols));
  w.bytes.resize(w.row_bytes * n_rows);
  w.values.resize(n_rows * n_cols);
  std::vector<float> row(n_cols);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (float& v : row) v = normal(rng);
    uint8_t* dst = w.bytes.data() + r * w.row_bytes;
    if (type == DType::kF32) {
      std::memcpy(dst, row.data(), n_cols * 4);
    } else if (type == DType::kF16) {
      F32ToF16Row(row.data(), reinterpret_cast<uint16_t*>(dst), n_cols);
    } else if (type == DType::kBF16) {
      F32ToBF16Row(row.data(), reinterpret_cast<uint16_t*>(dst), n_cols);
    } else if (!QuantizeRow(type, row.data(), dst, n_cols)) {
      EXPECT_TRUE(FillRandomBlocks(type, rng, dst, n_cols / Traits(type).block_elems));
    }
    EXPECT_TRUE(DequantizeRow(type, dst, w.values.data() + r * n_cols, n_cols));
  }
  return w;
}

// What the path is expected to compute in double: the matrix-vector path multiplies the decoded
// weights by the activations as quantized to 8-bit blocks (block types) or as they are (floats);
// the cuBLAS path by the activations rounded to F16 (BF16 for BF16 weights) and, for block types,
// the weights rounded to F16. Returns y and a bound per output: sum |w x|.
void Reference(DType type, const Weights& w, int64_t n_rows, int64_t n_cols,
               const std::vector<float>& x, int64_t n_tokens, const std::vector<float>& bias,
               bool gemm_path, std::vector<double>* y, std::vector<double>* magnitude) {
  std::vector<float> xs(x);
  if (!gemm_path && !IsFloat(type)) {
    for (size_t b = 0; b < xs.size() / 32; ++b) {
      ActivationBlock act;
      QuantizeActivationBlock(&x[32 * b], &act);
      for (int j = 0; j < 32; ++j) xs[32 * b + j] = act.d * float(act.qs[j]);
    }
  } else if (gemm_path && type == DType::kBF16) {
    for (float& v : xs) v = BF16ToF32(F32ToBF16(v));
  } else if (gemm_path && type != DType::kF32) {
    for (float& v : xs) v = F16ToF32(F32ToF16(v));
  }
  std::vector<float> ws(w.values);
  if (gemm_path && !IsFloat(type)) {
    for (float& v : ws) v = F16ToF32(F32ToF16(v));
  }
  y->assign(n_tokens * n_rows, 0.0);
  magnitude->assign(n_tokens * n_rows, 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < n_rows; ++r) {
      double sum = bias.empty() ? 0.0 : bias[r], abs_sum = 0.0;
      for (int64_t j = 0; j < n_cols; ++j) {
        const double product = double(ws[r * n_cols + j]) * xs[t * n_cols + j];
        sum += product;
        abs_sum += std::fabs(product);
      }
      (*y)[t * n_rows + r] = sum;
      (*magnitude)[t * n_rows + r] = abs_sum;
    }
  }
}

struct MatMulRun {
  cudaError_t error = cudaSuccess;
  std::vector<float> y;
};

MatMulRun RunMatMul(cudaStream_t stream, cublasHandle_t cublas, DType type, const Weights& w,
                    int64_t n_rows, int64_t n_cols, const std::vector<float>& x, int64_t n_tokens,
                    const std::vector<float>& bias) {
  DeviceArray<uint8_t> d_w(w.bytes);
  DeviceArray<float> d_x(x), d_bias(bias), d_y(size_t(n_tokens * n_rows));
  const size_t scratch_bytes = MatMulScratchBytes(type, n_rows, n_cols, n_tokens);
  DeviceArray<uint8_t> scratch(scratch_bytes);
  MatMulRun run;
  run.error = LaunchMatMul(stream, cublas, type, d_w.get(), w.row_bytes, n_rows, n_cols, d_x.get(),
                           n_tokens, bias.empty() ? nullptr : d_bias.get(), d_y.get(),
                           scratch.get(), scratch_bytes);
  if (run.error == cudaSuccess) run.error = cudaStreamSynchronize(stream);
  if (run.error == cudaSuccess) run.y = d_y.ToHost(size_t(n_tokens * n_rows));
  return run;
}

std::vector<float> RandomVector(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(n);
  for (float& value : v) value = normal(rng);
  return v;
}

// Every type, both paths (3 and 8 tokens: matrix-vector; 9 and 40: cuBLAS), with and without bias,
// on a row count that does not fill the last thread block.
TEST_F(CudaMatMulDeviceTest, EveryTypeMatchesTheReferenceOnBothPaths) {
  std::mt19937 rng(20);
  const int64_t n_rows = 67, n_cols = 512;
  for (DType type : kWeightTypes) {
    SCOPED_TRACE(DTypeName(type));
    const Weights w = RandomWeights(type, n_rows, n_cols, rng);
    for (int64_t n_tokens : {1, 3, 8, 9, 40}) {
      SCOPED_TRACE("n_tokens " + std::to_string(n_tokens));
      const std::vector<float> x = RandomVector(n_tokens * n_cols, rng);
      const std::vector<float> bias =
          n_tokens % 2 ? RandomVector(n_rows, rng) : std::vector<float>();
      const MatMulRun run = RunMatMul(stream_, cublas_, type, w, n_rows, n_cols, x, n_tokens, bias);
      ASSERT_EQ(run.error, cudaSuccess) << cudaGetErrorString(run.error);
      std::vector<double> expected, magnitude;
      Reference(type, w, n_rows, n_cols, x, n_tokens, bias, n_tokens > kMatVecMaxTokens, &expected,
                &magnitude);
      int failures = 0;
      for (size_t i = 0; i < expected.size(); ++i) {
        // f32 accumulation over 512 products (cuBLAS may split the sum differently): 1e-5 of the
        // magnitude, 1e-3 on the cuBLAS path for its F16 products' order.
        const double tolerance = (n_tokens > kMatVecMaxTokens ? 1e-3 : 1e-5) * magnitude[i] + 1e-6;
        if (std::fabs(run.y[i] - expected[i]) > tolerance && ++failures <= 3) {
          ADD_FAILURE() << "output " << i << ": " << run.y[i] << " expected " << expected[i];
        }
      }
    }
  }
}

// Float weights whose rows cannot be read 16 bytes at a time (100 columns) take the
// element-wise matrix-vector loop; cuBLAS takes any leading dimension.
TEST_F(CudaMatMulDeviceTest, FloatWeightsOfAnyWidth) {
  std::mt19937 rng(5);
  const int64_t n_rows = 33, n_cols = 100;
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(type));
    const Weights w = RandomWeights(type, n_rows, n_cols, rng);
    for (int64_t n_tokens : {1, 5, 12}) {
      const std::vector<float> x = RandomVector(n_tokens * n_cols, rng);
      const MatMulRun run = RunMatMul(stream_, cublas_, type, w, n_rows, n_cols, x, n_tokens, {});
      ASSERT_EQ(run.error, cudaSuccess) << cudaGetErrorString(run.error);
      std::vector<double> expected, magnitude;
      Reference(type, w, n_rows, n_cols, x, n_tokens, {}, n_tokens > kMatVecMaxTokens, &expected,
                &magnitude);
      for (size_t i = 0; i < expected.size(); ++i) {
        ASSERT_NEAR(run.y[i], expected[i], 1e-3 * magnitude[i] + 1e-6) << "output " << i;
      }
    }
  }
}

// The cuBLAS path over several F16 tiles of W (a tile is 32 MiB: 2048 rows of 8192 columns).
TEST_F(CudaMatMulDeviceTest, TiledDequantizationCoversEveryRow) {
  std::mt19937 rng(7);
  const int64_t n_rows = 4100, n_cols = 8192, n_tokens = 16;
  const Weights w = RandomWeights(DType::kQ4_K, n_rows, n_cols, rng);
  const std::vector<float> x = RandomVector(n_tokens * n_cols, rng);
  const MatMulRun run =
      RunMatMul(stream_, cublas_, DType::kQ4_K, w, n_rows, n_cols, x, n_tokens, {});
  ASSERT_EQ(run.error, cudaSuccess) << cudaGetErrorString(run.error);
  std::vector<double> expected, magnitude;
  Reference(DType::kQ4_K, w, n_rows, n_cols, x, n_tokens, {}, /*gemm_path=*/true, &expected,
            &magnitude);
  int failures = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::fabs(run.y[i] - expected[i]) > 1e-3 * magnitude[i] + 1e-6 && ++failures <= 3) {
      ADD_FAILURE() << "output " << i << ": " << run.y[i] << " expected " << expected[i];
    }
  }
}

// On the matrix-vector path a token's output is the same bit for bit alone or in any batch; in
// batch-invariant mode that holds for batches of any size.
TEST_F(CudaMatMulDeviceTest, MatrixVectorPathIsBatchInvariant) {
  std::mt19937 rng(11);
  const int64_t n_rows = 96, n_cols = 768;
  for (DType type : {DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kF16, DType::kF32}) {
    SCOPED_TRACE(DTypeName(type));
    const Weights w = RandomWeights(type, n_rows, n_cols, rng);
    const std::vector<float> bias = RandomVector(n_rows, rng);
    const int64_t n_tokens = 21;
    const std::vector<float> x = RandomVector(n_tokens * n_cols, rng);
    SetBatchInvariant(true);
    const MatMulRun batch = RunMatMul(stream_, cublas_, type, w, n_rows, n_cols, x, n_tokens, bias);
    SetBatchInvariant(false);
    ASSERT_EQ(batch.error, cudaSuccess);
    for (int64_t t : {0, 7, 8, 20}) {
      const std::vector<float> one(x.begin() + t * n_cols, x.begin() + (t + 1) * n_cols);
      const MatMulRun alone = RunMatMul(stream_, cublas_, type, w, n_rows, n_cols, one, 1, bias);
      ASSERT_EQ(alone.error, cudaSuccess);
      EXPECT_EQ(0, std::memcmp(alone.y.data(), batch.y.data() + t * n_rows, n_rows * 4))
          << "token " << t;
    }
  }
}

TEST_F(CudaMatMulDeviceTest, EmbedRowsMatchTheDequantizerBitForBit) {
  std::mt19937 rng(3);
  const int64_t n_vocab = 50, n_cols = 256;
  const std::vector<int32_t> tokens = {0, 49, 7, 7, 23};
  for (DType type : kWeightTypes) {
    SCOPED_TRACE(DTypeName(type));
    const Weights table = RandomWeights(type, n_vocab, n_cols, rng);
    DeviceArray<uint8_t> d_table(table.bytes);
    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<float> d_out(tokens.size() * n_cols);
    ASSERT_EQ(LaunchEmbedRows(stream_, type, d_table.get(), table.row_bytes, n_cols, d_tokens.get(),
                              int64_t(tokens.size()), d_out.get()),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const std::vector<float> out = d_out.ToHost(tokens.size() * n_cols);
    for (size_t t = 0; t < tokens.size(); ++t) {
      EXPECT_EQ(0, std::memcmp(out.data() + t * n_cols, table.values.data() + tokens[t] * n_cols,
                               n_cols * 4))
          << "token " << t;
    }
  }
}

}  // namespace
}  // namespace petrel::cuda
