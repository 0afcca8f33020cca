// Internal: the CPU backend's mat_mul table, one row per weight format it multiplies: the
// activations its kernel takes, the kernel, and the driver that kernel runs on.
//
// Everything else reads this table: QuantActivationType, MatMulQuantized and MatMulQuantizedF32
// (quant_matmul.cc), the table's mat_mul, SupportsWeightType and MatMulPathName (kernels.cc), and
// the per-format TUs, whose drivers check at compile time that their activation blocks and their
// driver are the ones named here (matmul_entry.h, quant_dot-inl.h, quant_lanes_driver-inl.h).
// Adding a weight format: one row here and its matmul_<type>.cc.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/kernel_entry_points.h"  // MatMulF32, MatMulQ4_0, ...
#include "quant/types.h"              // DType

namespace petrel::cpu {

// How a kernel computes; `petrel info` prints it (MatMulPathName).
enum class MatMulDriver : uint8_t {
  kF32Tiles,         // matmul-inl.h: f32 FMA tiles on f32 rows
  kWidenedF32Tiles,  // matmul-inl.h: the same tiles on F16/BF16 rows converted to f32
  kRowsInLanes,      // quant_lanes_driver-inl.h: int8, a group of rows transposed into lanes
  kPairPerBlock,     // quant_dot-inl.h: int8, one (row, token) pair per block
};

// The signatures of HostKernels::mat_mul and mat_mul_quantized without the weight type.
using FloatMatMulFn = void (*)(const void* w, size_t w_row_bytes, size_t n_in, const float* x,
                               size_t x_stride, size_t n_tokens, const float* bias, float* out,
                               size_t out_stride, size_t row_begin, size_t row_end);
using QuantMatMulFn = void (*)(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                               size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                               size_t out_stride, size_t row_begin, size_t row_end);

struct MatMulKernel {
  DType weight;
  // kF32: `f32` multiplies the f32 activations as they are. Otherwise the block format (Q8_0,
  // Q8_1, Q8_K) each token's activations are quantized to once per op for `quant`.
  DType activation;
  MatMulDriver driver;
  FloatMatMulFn f32;    // set exactly when activation is kF32
  QuantMatMulFn quant;  // set exactly when it is not
};

constexpr MatMulKernel FloatMatMulKernel(DType weight, MatMulDriver driver, FloatMatMulFn f32) {
  return {weight, DType::kF32, driver, f32, nullptr};
}
constexpr MatMulKernel QuantMatMulKernel(DType weight, DType activation, MatMulDriver driver,
                                         QuantMatMulFn quant) {
  return {weight, activation, driver, nullptr, quant};
}

// Formats with a min per block (Q4_1, Q5_1) take Q8_1, whose stored block sums the min
// multiplies; the other 32-element formats take Q8_0, and so do Q1_0 and Q2_0, whose 128- and
// 64-element blocks are whole numbers of Q8_0 blocks sharing one scale; the 256-element
// super-block formats (K-quants, IQ, TQ) take Q8_K, whose 16-element sums serve the K-quants'
// mins and offsets.
inline constexpr MatMulKernel kMatMulKernels[] = {
    FloatMatMulKernel(DType::kF32, MatMulDriver::kF32Tiles, MatMulF32),
    FloatMatMulKernel(DType::kF16, MatMulDriver::kWidenedF32Tiles, MatMulF16),
    FloatMatMulKernel(DType::kBF16, MatMulDriver::kWidenedF32Tiles, MatMulBF16),
    QuantMatMulKernel(DType::kQ4_0, DType::kQ8_0, MatMulDriver::kRowsInLanes, MatMulQ4_0),
    QuantMatMulKernel(DType::kQ4_1, DType::kQ8_1, MatMulDriver::kRowsInLanes, MatMulQ4_1),
    QuantMatMulKernel(DType::kQ5_0, DType::kQ8_0, MatMulDriver::kRowsInLanes, MatMulQ5_0),
    QuantMatMulKernel(DType::kQ5_1, DType::kQ8_1, MatMulDriver::kRowsInLanes, MatMulQ5_1),
    QuantMatMulKernel(DType::kQ8_0, DType::kQ8_0, MatMulDriver::kRowsInLanes, MatMulQ8_0),
    QuantMatMulKernel(DType::kIQ4_NL, DType::kQ8_0, MatMulDriver::kRowsInLanes, MatMulIQ4_NL),
    QuantMatMulKernel(DType::kQ2_K, DType::kQ8_K, MatMulDriver::kPairPerBlock, MatMulQ2_K),
    QuantMatMulKernel(DType::kQ3_K, DType::kQ8_K, MatMulDriver::kPairPerBlock, MatMulQ3_K),
    QuantMatMulKernel(DType::kQ4_K, DType::kQ8_K, MatMulDriver::kRowsInLanes, MatMulQ4_K),
    QuantMatMulKernel(DType::kQ5_K, DType::kQ8_K, MatMulDriver::kRowsInLanes, MatMulQ5_K),
    QuantMatMulKernel(DType::kQ6_K, DType::kQ8_K, MatMulDriver::kRowsInLanes, MatMulQ6_K),
    QuantMatMulKernel(DType::kIQ4_XS, DType::kQ8_K, MatMulDriver::kRowsInLanes, MatMulIQ4_XS),
    QuantMatMulKernel(DType::kIQ1_S, DType::kQ8_K, MatMulDriver::kPairPerBlock, MatMulIQ1_S),
    QuantMatMulKernel(DType::kIQ1_M, DType::kQ8_K, MatMulDriver::kPairPerBlock, MatMulIQ1_M),
    QuantMatMulKernel(DType::kIQ2_XXS, DType::kQ8_K, MatMulDriver::kPairPerBlock, MatMulIQ2_XXS),
    QuantMatMulKernel(DType::kIQ2_XS, DType::kQ8_K, MatMulDriver::kPairPerBlock, MatMulIQ2_XS),
    QuantMatMulKernel(DType::kIQ2_S, DType::kQ8_K, MatMulDriver::kPairPerBlock, MatMulIQ2_S),
    QuantMatMulKernel(DType::kIQ3_XXS, DType::kQ8_K, MatMulDriver::kPairPerBlock, MatMulIQ3_XXS),
    QuantMatMulKernel(DType::kIQ3_S, DType::kQ8_K, MatMulDriver::kPairPerBlock, MatMulIQ3_S),
    QuantMatMulKernel(DType::kTQ1_0, DType::kQ8_K, MatMulDriver::kPairPerBlock, MatMulTQ1_0),
    QuantMatMulKernel(DType::kTQ2_0, DType::kQ8_K, MatMulDriver::kPairPerBlock, MatMulTQ2_0),
    QuantMatMulKernel(DType::kMXFP4, DType::kQ8_0, MatMulDriver::kRowsInLanes, MatMulMXFP4),
    QuantMatMulKernel(DType::kQ1_0, DType::kQ8_0, MatMulDriver::kPairPerBlock, MatMulQ1_0),
    QuantMatMulKernel(DType::kQ2_0, DType::kQ8_0, MatMulDriver::kPairPerBlock, MatMulQ2_0),
};

// The row for weights of `type`, or nullptr when the CPU backend has no kernel for them. A
// linear search of a few rows, once per mat_mul call.
constexpr const MatMulKernel* FindMatMulKernel(DType type) {
  for (const MatMulKernel& kernel : kMatMulKernels) {
    if (kernel.weight == type) return &kernel;
  }
  return nullptr;
}

// The activations the kernel for weights of `type` takes; the table must have a row for it (a
// compile error in a constant expression otherwise).
constexpr DType MatMulActivationType(DType type) { return FindMatMulKernel(type)->activation; }

// Whether `driver` takes f32 activations (else block-quantized ones).
constexpr bool TakesF32Activations(MatMulDriver driver) {
  switch (driver) {
    case MatMulDriver::kF32Tiles:
    case MatMulDriver::kWidenedF32Tiles:
      return true;
    case MatMulDriver::kRowsInLanes:
    case MatMulDriver::kPairPerBlock:
      return false;
  }
  return false;
}

// The table's invariants, checked wherever it is included.
constexpr bool EachWeightTypeOnce() {
  for (const MatMulKernel& kernel : kMatMulKernels) {
    if (kernel.weight >= DType::kCount || FindMatMulKernel(kernel.weight) != &kernel) return false;
  }
  return true;
}
constexpr bool KernelsMatchActivations() {
  for (const MatMulKernel& kernel : kMatMulKernels) {
    const bool f32 = kernel.activation == DType::kF32;
    if (f32 != TakesF32Activations(kernel.driver)) return false;
    if (f32 != (kernel.f32 != nullptr) || f32 == (kernel.quant != nullptr)) return false;
    // The block formats quantize_activation.cc produces.
    if (!f32 && kernel.activation != DType::kQ8_0 && kernel.activation != DType::kQ8_1 &&
        kernel.activation != DType::kQ8_K) {
      return false;
    }
  }
  return true;
}
// GCC cannot evaluate address comparisons at compile time under AddressSanitizer: the checks
// of the table that compare function or row addresses run in every other build (the release and
// cross builds of every CI run).
#if defined(__SANITIZE_ADDRESS__)
#define PETREL_TABLE_STATIC_ASSERT(condition, message) static_assert(true)
#else
#define PETREL_TABLE_STATIC_ASSERT(condition, message) static_assert(condition, message)
#endif
PETREL_TABLE_STATIC_ASSERT(EachWeightTypeOnce(), "kMatMulKernels: one row per weight type");
PETREL_TABLE_STATIC_ASSERT(
    KernelsMatchActivations(),
    "kMatMulKernels: an f32 kernel and f32 driver exactly for f32 activations, else a quantized "
    "kernel and int8 driver for Q8_0, Q8_1 or Q8_K activations");

}  // namespace petrel::cpu
