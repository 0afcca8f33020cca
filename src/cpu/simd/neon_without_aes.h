// Lets AArch64 cores without the AES extension run the NEON kernels.
//
// Highway 1.0.3 offers its AArch64 NEON target only where the CPU reports AES, because it
// compiles that target with "+crypto" for its AES and carry-less multiply ops. The Armv8 crypto
// extension is optional: the Raspberry Pi 3, Zero 2 and 4 lack it and would run the scalar code,
// several times slower. petrel's kernels use neither op, and the compiler emits crypto
// instructions only for their intrinsics, so every core with Advanced SIMD (every AArch64
// application core) runs the NEON code correctly.
#pragma once

#include <cstdint>

namespace petrel::cpu {

// The supported-target mask with NEON added where the CPU has Advanced SIMD and the mask lacks
// NEON only for want of AES; otherwise `supported` unchanged. Pure, so any host can test it.
int64_t WithNeonWithoutAes(int64_t supported, bool has_advanced_simd);

// Applies WithNeonWithoutAes to Highway's dispatch on AArch64 Linux; elsewhere does nothing.
void EnableNeonWithoutAes();

}  // namespace petrel::cpu
