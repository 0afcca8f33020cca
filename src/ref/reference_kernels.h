// The `ref` backend's kernels: plain scalar C++, obviously correct, the oracle for every other
// backend.
#pragma once

#include "cpu/kernel_table.h"  // HostKernels
#include "quant/types.h"       // DType

namespace petrel::ref {

// The scalar kernel table. Dot products and sums accumulate in double and round once to float,
// so the reference is (nearly) independent of summation order; it is slow and meant for tests.
const HostKernels& ReferenceKernels();

// Whether `mat_mul` accepts weights of `type`: every type quant/quantize.h can dequantize (float
// and block formats); the row is dequantized exactly and dotted in double. The engine checks this when it
// loads a model; calling `mat_mul` with any other type is a bug and fails a PETREL_CHECK.
bool SupportsWeightType(DType type);

}  // namespace petrel::ref
