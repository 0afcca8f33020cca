// The launchers behind LaunchMatMul and LaunchEmbedRows, one per kernel file; internal to
// src/cuda/matmul. Shapes as in matmul.h; every pointer is device memory, every launch
// asynchronous on `stream`, returning the launch's error.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/matmul/blocks.cuh"  // ActivationBlock
#include "cuda/matmul/matmul.h"    // kMatVecMaxTokens
#include "quant/types.h"           // DType

namespace petrel::cuda {

// Tokens the matrix-vector kernels handle per launch.
constexpr int64_t kMatVecTokens = kMatVecMaxTokens;

// quantize_activations.cu: act (n_tokens, n_cols / 32) = x (n_tokens, n_cols) in 8-bit blocks;
// n_cols a multiple of 32.
cudaError_t LaunchQuantizeActivations(cudaStream_t stream, const float* x, int64_t n_tokens,
                                      int64_t n_cols, ActivationBlock* act);

// matvec_blocks.cu: y (n_tokens, n_rows) = W . act + bias for a block type; n_tokens <=
// kMatVecTokens; cudaErrorInvalidValue for a type without block kernels.
cudaError_t LaunchBlockMatVec(cudaStream_t stream, DType type, const void* w, size_t row_bytes,
                              int64_t n_rows, int64_t n_cols, const ActivationBlock* act,
                              int64_t n_tokens, const float* bias, float* y);
// matvec_blocks_lowbit.cu: the same for the types of LowBitBlockWeights, launched after
// LaunchBlockMatVec's checks; false, launching nothing, for any other type.
bool LaunchLowBitBlockMatVec(cudaStream_t stream, DType type, const void* w, size_t row_bytes,
                             int64_t n_rows, int64_t n_cols, const ActivationBlock* act,
                             int64_t n_tokens, const float* bias, float* y);

// matvec_float.cu: the same for F32, F16 and BF16 weights, from x in f32.
cudaError_t LaunchFloatMatVec(cudaStream_t stream, DType type, const void* w, size_t row_bytes,
                              int64_t n_rows, int64_t n_cols, const float* x, int64_t n_tokens,
                              const float* bias, float* y);

// dequantize_f16.cu: out (n_rows, n_cols) F16 = rows of a block-type matrix, decoded.
cudaError_t LaunchDequantizeToF16(cudaStream_t stream, DType type, const void* w, size_t row_bytes,
                                  int64_t n_rows, int64_t n_cols, void* out);

// convert.cu: element-wise conversions of activations and the bias broadcast of the GEMM path.
cudaError_t LaunchConvertToF16(cudaStream_t stream, const float* x, int64_t n_elems, void* out);
cudaError_t LaunchConvertToBF16(cudaStream_t stream, const float* x, int64_t n_elems, void* out);
// y (n_tokens, n_rows) += bias (n_rows).
cudaError_t LaunchAddBias(cudaStream_t stream, const float* bias, int64_t n_tokens, int64_t n_rows,
                          float* y);

// gemm.cu: the cuBLAS path for any n_tokens (matmul.h's contract, minus the scratch check),
// the scratch it needs, and the rows of W it dequantizes per GEMM.
cudaError_t LaunchGemm(cudaStream_t stream, cublasHandle_t cublas, DType type, const void* w,
                       size_t row_bytes, int64_t n_rows, int64_t n_cols, const float* x,
                       int64_t n_tokens, const float* bias, float* y, void* scratch);
size_t GemmScratchBytes(DType type, int64_t n_rows, int64_t n_cols, int64_t n_tokens);
int64_t GemmTileRows(int64_t n_rows, int64_t n_cols);

}  // namespace petrel::cuda
