// The arithmetic roofs a prompt runs against, as ../shared/BASELINES.md measures them on AVX2:
// independent chains of f32 FMAs as wide as the float kernels' dispatched target's (512-bit on
// AVX3/AVX3_DL, where a core with 512-bit FMA pipes does twice the 256-bit rate; FmaRoofIs512
// says which), and of the int8 dot step the integer kernels' dispatched target uses: 512-bit vpdpbusd (64 bytes, 128 operations) where they run AVX3_DL
// (AVX512-VNNI), else vpmaddubsw + vpmaddwd + convert + FMA over 32 bytes, counted as 64
// operations (Int8RoofIsVnni says which). `petrel bench` measures the roof next to each
// prompt run, so that the fraction of it is a same-machine, same-moment figure; the Google
// benchmarks time the same loops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace petrel::cpu {

// Whether this CPU runs the AVX2 + FMA roof loops (x86 only); the others return 0 without it.
bool ComputeRoofAvailable();

// Runs `steps` steps of the loop and returns the operations done (2 per multiply-add).
uint64_t FmaRoofSteps(int64_t steps);     // 256-bit (AVX2) FMAs
uint64_t Fma512RoofSteps(int64_t steps);  // 512-bit FMAs; needs AVX-512F (FmaRoofIs512)
uint64_t Int8RoofSteps(int64_t steps);
uint64_t Int8VnniRoofSteps(int64_t steps);  // needs AVX512-VNNI (Int8RoofIsVnni)

// Whether Roof::kF32Fma times Fma512RoofSteps: the float kernels dispatch to AVX3 or AVX3_DL
// (after PETREL_CPU_TARGET).
bool FmaRoofIs512();

// Whether Roof::kInt8Dot times Int8VnniRoofSteps: the integer kernels dispatch to AVX3_DL.
bool Int8RoofIsVnni();

enum class Roof { kF32Fma, kInt8Dot };

// Operations per second of `threads` threads running the loop for about `seconds` each: the
// median of `passes`, as ../shared/BASELINES.md's bounds are medians of their samples (a best
// of a few short samples on a shared host reads high against a run of several seconds).
double ComputeRoofOpsPerSecond(Roof roof, size_t threads, double seconds = 0.02, size_t passes = 5);

// The median of `values` (the mean of the middle two for an even count); 0 when empty.
double Median(std::vector<double> values);

}  // namespace petrel::cpu
