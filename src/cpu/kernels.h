// The CPU backend's host kernels: Highway SIMD, dispatched at run time to the best target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cpu/kernel_table.h"  // HostKernels
#include "quant/types.h"       // DType

namespace petrel::cpu {

// The Highway kernel table. Each entry dispatches once per call to the best target the CPU
// supports (or the one forced by `hwy::SetSupportedTargetsForTest`). The environment variable
// PETREL_CPU_TARGET (avx3_dl, avx3, avx2, sse4, ...: a name `SimdTargetName` prints) caps the
// targets at the named one, so that one machine can measure the code another CPU would run.
const HostKernels& CpuKernels();

// The same table, but BF16 weights (and with `f16_too` F16 weights) are multiplied with
// `vdpbf16ps` and activations rounded to bfloat16, in every batch size, where
// Bf16DotSupported() (bf16_dot.h: the arithmetic; elsewhere as CpuKernels()). Faster prompts,
// other bits: `--bf16-dot auto` (BF16 only, the default) and `on` (both).
const HostKernels& CpuKernelsWithBf16Dot(bool f16_too);

// Reads [data, data + n) once with SIMD loads and returns a sum of its bytes' words (so the
// reads cannot be elided): the memory-read roof `petrel bench` measures generation against.
uint64_t StreamRead(const void* data, size_t n);

// The Highway target the kernels dispatch to now, lowercase ("avx2", "avx3", ...), followed by
// the integer mat_mul kernels' where it differs ("avx3, int8 avx3_dl").
std::string SimdTargetName();

// Whether `mat_mul` accepts weights of `type`: whether the mat_mul table (kMatMulKernels in
// matmul_table.h: F32, F16, BF16 and the block formats with a Highway kernel) has a row for it,
// or the type is a block format the quant layer decodes (run row by row through f32; slower).
// The engine checks this when it loads a model; calling `mat_mul` with any other type is a bug
// and fails a PETREL_CHECK.
bool SupportsWeightType(DType type);

// How `mat_mul` computes with weights of `type`, for `petrel info`: the driver and the
// activation format (e.g. "int8, rows in lanes, Q8_K activations").
std::string MatMulPathName(DType type);

}  // namespace petrel::cpu
