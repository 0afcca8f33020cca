// The Highway target the integer (quantized-weight) mat_mul kernels dispatch to. Their TUs are
// compiled for one more target than the rest (AVX3_DL, for AVX512-VNNI's vpdpbusd; see
// src/cpu/meson.build), so on a VNNI core they run a better target than the float kernels.
#pragma once

#include <cstdint>

namespace petrel::cpu {

// The target's Highway bit (HWY_AVX3_DL, HWY_AVX3, ...) as dispatch chooses it now, after
// PETREL_CPU_TARGET or hwy::SetSupportedTargetsForTest.
int64_t Int8KernelTarget();

}  // namespace petrel::cpu
