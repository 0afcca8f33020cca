// LaunchMatMul's choice of path (matrix-vector kernels or cuBLAS), its scratch and its checks;
// the weight types with kernels; the batch-invariant switch.
#include <algorithm>
#include <atomic>

#include "cuda/matmul/launch.h"
#include "cuda/matmul/matmul.h"

namespace petrel::cuda {
namespace {

std::atomic<bool> batch_invariant{false};

bool IsBlockType(DType type) {
  return VisitBlockType(type, [](auto) {});
}
bool IsFloatType(DType type) {
  return VisitFloatType(type, [](auto) {});
}

// Activation blocks of up to kMatVecMaxTokens tokens, for the block types' matrix-vector path.
size_t MatVecScratchBytes(DType type, int64_t n_cols, int64_t n_tokens) {
  if (!IsBlockType(type)) return 0;
  return size_t(std::min(n_tokens, kMatVecMaxTokens)) * size_t(n_cols / kSubBlockElems) *
         sizeof(ActivationBlock);
}

}  // namespace

void SetBatchInvariant(bool on) { batch_invariant.store(on); }
bool BatchInvariant() { return batch_invariant.load(); }

bool HasWeightKernels(DType type) { return IsBlockType(type) || IsFloatType(type); }

size_t MatMulScratchBytes(DType type, int64_t n_rows, int64_t n_cols, int64_t n_tokens) {
  if (!HasWeightKernels(type) || n_rows <= 0 || n_cols <= 0 || n_tokens <= 0) return 0;
  const size_t mat_vec = MatVecScratchBytes(type, n_cols, n_tokens);
  if (n_tokens <= kMatVecMaxTokens) return mat_vec;
  // Enough for either path, so that the batch-invariant switch needs no new scratch.
  return std::max(mat_vec, GemmScratchBytes(type, n_rows, n_cols, n_tokens));
}

cudaError_t LaunchMatMul(cudaStream_t stream, cublasHandle_t cublas, DType type, const void* w,
                         size_t row_bytes, int64_t n_rows, int64_t n_cols, const float* x,
                         int64_t n_tokens, const float* bias, float* y, void* scratch,
                         size_t scratch_bytes) {
  if (!HasWeightKernels(type) || n_rows < 0 || n_cols < 0 || n_tokens < 0) {
    return cudaErrorInvalidValue;
  }
  if (n_rows == 0 || n_tokens == 0) return cudaSuccess;
  // Whole blocks, and rows that hold them: the kernels index blocks within `row_bytes`.
  const std::optional<uint64_t> min_row_bytes = RowBytes(type, uint64_t(n_cols));
  if (!min_row_bytes || row_bytes < *min_row_bytes || row_bytes % 2 != 0 ||
      (type == DType::kF32 && row_bytes % 4 != 0)) {
    return cudaErrorInvalidValue;
  }
  if (scratch_bytes < MatMulScratchBytes(type, n_rows, n_cols, n_tokens)) {
    return cudaErrorInvalidValue;
  }
  if (n_tokens > kMatVecMaxTokens && !BatchInvariant()) {
    const cudaError_t error = LaunchGemm(stream, cublas, type, w, row_bytes, n_rows, n_cols, x,
                                         n_tokens, bias, y, scratch);
    // cuBLAS may have no BF16 GEMM for an older GPU; the matrix-vector kernels read BF16 anywhere.
    const bool no_bf16_gemm = type == DType::kBF16 && (error == cudaErrorNotSupported ||
                                                       error == cudaErrorNoKernelImageForDevice);
    if (!no_bf16_gemm) return error;
  }
  auto* act = static_cast<ActivationBlock*>(scratch);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kMatVecMaxTokens) {
    const int64_t chunk = std::min(kMatVecMaxTokens, n_tokens - t0);
    const float* x_chunk = x + t0 * n_cols;
    float* y_chunk = y + t0 * n_rows;
    cudaError_t error;
    if (IsFloatType(type)) {
      error = LaunchFloatMatVec(stream, type, w, row_bytes, n_rows, n_cols, x_chunk, chunk, bias,
                                y_chunk);
    } else {
      // The activation blocks are reused per chunk: the launches are ordered on `stream`.
      error = LaunchQuantizeActivations(stream, x_chunk, chunk, n_cols, act);
      if (error == cudaSuccess) {
        error = LaunchBlockMatVec(stream, type, w, row_bytes, n_rows, n_cols, act, chunk, bias,
                                  y_chunk);
      }
    }
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

}  // namespace petrel::cuda
