// The many-token path: y = x W^T with cuBLAS, F32 accumulation. F32 weights through
// cublasSgemm; F16 and BF16 weights straight from their bytes with x converted to the same type;
// block types dequantized to F16 a tile of rows at a time (so the scratch is bounded by the tile,
// not the matrix) with x converted to F16.
//
// In cuBLAS's column-major terms W (n_rows, n_cols) row-major is an n_cols x n_rows matrix, x is
// n_cols x n_tokens and y is n_rows x n_tokens with leading dimension n_rows, so
// y = op(W)^T x is one GEMM with op = T on W and N on x; a tile of rows r0.. writes y + r0.
#include <algorithm>
#include <climits>

#include "cuda/matmul/launch.h"

namespace petrel::cuda {
namespace {

constexpr size_t kScratchAlign = 256;
// Bytes of the F16 weight tile: large enough that a tile's GEMM keeps the GPU busy (4096 rows of
// 4096 columns), small next to the weights themselves.
constexpr size_t kTileBytes = size_t(32) << 20;

size_t AlignUp(size_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

cudaError_t FromCublas(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return cudaSuccess;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return cudaErrorMemoryAllocation;
    case CUBLAS_STATUS_INVALID_VALUE:
      return cudaErrorInvalidValue;
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return cudaErrorInitializationError;
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return cudaErrorNoKernelImageForDevice;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return cudaErrorNotSupported;
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return cudaErrorLaunchFailure;
    default:
      return cudaErrorUnknown;  // a C enum: cuBLAS versions add values
  }
}

#define PETREL_RETURN_IF_CUDA_ERROR(expr)                   \
  do {                                                      \
    const cudaError_t petrel_error_ = (expr);               \
    if (petrel_error_ != cudaSuccess) return petrel_error_; \
  } while (0)

bool FitsInt(int64_t value) { return value >= 0 && value <= INT_MAX; }

// One GEMM: y (n_tokens, ldy) at columns of A's rows = A (m, k) row-major, rows lda elements apart,
// times x (n_tokens, k).
cudaError_t Gemm(cublasHandle_t cublas, const void* a, cudaDataType a_type, int64_t lda,
                 const void* x, cudaDataType x_type, int64_t m, int64_t k, int64_t n_tokens,
                 float* y, int64_t ldy) {
  const float alpha = 1.f, beta = 0.f;
  return FromCublas(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(m), int(n_tokens), int(k),
                                 &alpha, a, a_type, int(lda), x, x_type, int(k), &beta, y,
                                 CUDA_R_32F, int(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

int64_t GemmTileRows(int64_t n_rows, int64_t n_cols) {
  const int64_t fit = std::max<int64_t>(1, int64_t(kTileBytes) / std::max<int64_t>(1, 2 * n_cols));
  if (fit >= n_rows) return n_rows;
  return fit >= 256 ? fit / 256 * 256 : fit;
}

size_t GemmScratchBytes(DType type, int64_t n_rows, int64_t n_cols, int64_t n_tokens) {
  const size_t x_half_bytes = AlignUp(size_t(n_tokens) * size_t(n_cols) * 2);
  if (type == DType::kF32) return 0;
  if (type == DType::kF16 || type == DType::kBF16) return x_half_bytes;
  if (VisitBlockType(type, [](auto) {})) {
    return x_half_bytes + size_t(GemmTileRows(n_rows, n_cols)) * size_t(n_cols) * 2;
  }
  return 0;
}

cudaError_t LaunchGemm(cudaStream_t stream, cublasHandle_t cublas, DType type, const void* w,
                       size_t row_bytes, int64_t n_rows, int64_t n_cols, const float* x,
                       int64_t n_tokens, const float* bias, float* y, void* scratch) {
  if (!FitsInt(n_rows) || !FitsInt(n_cols) || !FitsInt(n_tokens) || !FitsInt(row_bytes)) {
    return cudaErrorInvalidValue;
  }
  PETREL_RETURN_IF_CUDA_ERROR(FromCublas(cublasSetStream(cublas, stream)));
  auto* bytes = static_cast<uint8_t*>(scratch);
  if (type == DType::kF32) {
    const float alpha = 1.f, beta = 0.f;
    PETREL_RETURN_IF_CUDA_ERROR(FromCublas(
        cublasSgemm(cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(n_rows), int(n_tokens), int(n_cols),
                    &alpha, static_cast<const float*>(w), int(row_bytes / sizeof(float)), x,
                    int(n_cols), &beta, y, int(n_rows))));
  } else if (type == DType::kF16) {
    PETREL_RETURN_IF_CUDA_ERROR(LaunchConvertToF16(stream, x, n_tokens * n_cols, bytes));
    PETREL_RETURN_IF_CUDA_ERROR(Gemm(cublas, w, CUDA_R_16F, row_bytes / 2, bytes, CUDA_R_16F,
                                     n_rows, n_cols, n_tokens, y, n_rows));
  } else if (type == DType::kBF16) {
    PETREL_RETURN_IF_CUDA_ERROR(LaunchConvertToBF16(stream, x, n_tokens * n_cols, bytes));
    PETREL_RETURN_IF_CUDA_ERROR(Gemm(cublas, w, CUDA_R_16BF, row_bytes / 2, bytes, CUDA_R_16BF,
                                     n_rows, n_cols, n_tokens, y, n_rows));
  } else if (VisitBlockType(type, [](auto) {})) {
    PETREL_RETURN_IF_CUDA_ERROR(LaunchConvertToF16(stream, x, n_tokens * n_cols, bytes));
    uint8_t* tile = bytes + AlignUp(size_t(n_tokens) * size_t(n_cols) * 2);
    const int64_t tile_rows = GemmTileRows(n_rows, n_cols);
    // The tile is reused: each GEMM is ordered on `stream` before the next tile's decode.
    for (int64_t r0 = 0; r0 < n_rows; r0 += tile_rows) {
      const int64_t rows = std::min(tile_rows, n_rows - r0);
      PETREL_RETURN_IF_CUDA_ERROR(LaunchDequantizeToF16(
          stream, type, static_cast<const uint8_t*>(w) + size_t(r0) * row_bytes, row_bytes, rows,
          n_cols, tile));
      PETREL_RETURN_IF_CUDA_ERROR(Gemm(cublas, tile, CUDA_R_16F, n_cols, bytes, CUDA_R_16F, rows,
                                       n_cols, n_tokens, y + r0, n_rows));
    }
  } else {
    return cudaErrorInvalidValue;
  }
  if (bias) PETREL_RETURN_IF_CUDA_ERROR(LaunchAddBias(stream, bias, n_tokens, n_rows, y));
  return cudaSuccess;
}

}  // namespace petrel::cuda
