#include "cpu/roofs/compute_roof.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "cpu/matmul/int8_target.h"     // Int8KernelTarget
#include "cpu/kernels.h"         // CpuKernels
#include "hwy/detect_targets.h"  // HWY_AVX3_DL, HWY_TARGETS
#include "hwy/targets.h"         // SupportedTargets

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PETREL_X86_ROOF 1
#else
#define PETREL_X86_ROOF 0
#endif

namespace petrel::cpu {

#if PETREL_X86_ROOF
bool ComputeRoofAvailable() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// Makes the accumulators observable, so that the loop is not optimised away.
__attribute__((target("avx2,fma"))) void KeepAlive(const __m256* acc, int n) {
  float sink[8];
  __m256 sum = acc[0];
  for (int k = 1; k < n; ++k) sum = _mm256_add_ps(sum, acc[k]);
  _mm256_storeu_ps(sink, sum);
  asm volatile("" : : "r"(sink) : "memory");
}

// Ten independent chains: more than FMA latency x throughput on any AVX2 core.
__attribute__((target("avx2,fma"))) uint64_t FmaRoofSteps(int64_t steps) {
  if (!ComputeRoofAvailable()) return 0;
  __m256 acc[10];
  for (int k = 0; k < 10; ++k) acc[k] = _mm256_set1_ps(float(k));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < steps; ++i) {
    for (int k = 0; k < 10; ++k) acc[k] = _mm256_fmadd_ps(acc[k], a, b);
  }
  KeepAlive(acc, 10);
  return uint64_t(steps) * 10 * 16;
}

// The FMA step of the float kernels on AVX-512 targets: 512-bit FMAs, 32 operations each. A
// core with two 512-bit FMA pipes and a 4-cycle latency needs 8 chains; 16 cover longer
// latencies and still leave registers for the operands.
__attribute__((target("avx2,fma,avx512f"))) uint64_t Fma512RoofSteps(int64_t steps) {
  __m512 acc[16];
  for (int k = 0; k < 16; ++k) acc[k] = _mm512_set1_ps(float(k));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < steps; ++i) {
    for (int k = 0; k < 16; ++k) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
  }
  __m512 sum = acc[0];
  for (int k = 1; k < 16; ++k) sum = _mm512_add_ps(sum, acc[k]);
  alignas(64) float sink[16];
  _mm512_store_ps(sink, sum);
  asm volatile("" : : "r"(sink) : "memory");
  return uint64_t(steps) * 16 * 32;
}

bool FmaRoofIs512() {
  if (!ComputeRoofAvailable()) return false;
  CpuKernels();  // applies PETREL_CPU_TARGET
  // The target the float kernels dispatch to, as SimdTargetName reports it.
  const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  const int64_t best = targets & -targets;
  return best == HWY_AVX3 || best == HWY_AVX3_DL;
}

__attribute__((target("avx2,fma"))) uint64_t Int8RoofSteps(int64_t steps) {
  if (!ComputeRoofAvailable()) return 0;
  // The unsigned operand comes from an L1-resident buffer (a load, not an ALU op), so that no
  // product is loop-invariant.
  alignas(32) uint8_t a_bytes[64 * 32];
  for (size_t i = 0; i < sizeof(a_bytes); ++i) a_bytes[i] = uint8_t(i * 7 % 16);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256 scale = _mm256_set1_ps(1e-9f);
  __m256i b[8];
  __m256 acc[8];
  for (int k = 0; k < 8; ++k) {
    b[k] = _mm256_set1_epi8(char(k + 1));
    acc[k] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < steps; ++i) {
    const __m256i a = _mm256_load_si256(reinterpret_cast<const __m256i*>(a_bytes + (i & 63) * 32));
    for (int k = 0; k < 8; ++k) {
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(a, b[k]), ones);
      acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[k]);
    }
  }
  KeepAlive(acc, 8);
  return uint64_t(steps) * 8 * 64;
}

// The int8 dot step of the AVX3_DL kernels: 512-bit vpdpbusd, which multiplies 64 byte pairs
// and adds them four by four into int32 lanes in one instruction (convert and FMA once per
// block, not per step), counted as 128 operations. Twelve chains cover its latency x
// throughput; the unsigned operand comes from L1 as above.
__attribute__((target("avx2,avx512f,avx512bw,avx512vnni"))) uint64_t Int8VnniRoofSteps(
    int64_t steps) {
  alignas(64) uint8_t a_bytes[64 * 64];
  for (size_t i = 0; i < sizeof(a_bytes); ++i) a_bytes[i] = uint8_t(i * 7 % 16);
  __m512i b[12], acc[12];
  for (int k = 0; k < 12; ++k) {
    b[k] = _mm512_set1_epi8(char(k + 1));
    acc[k] = _mm512_setzero_si512();
  }
  for (int64_t i = 0; i < steps; ++i) {
    const __m512i a = _mm512_load_si512(a_bytes + (i & 63) * 64);
    for (int k = 0; k < 12; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], a, b[k]);
  }
  __m512i sum = acc[0];
  for (int k = 1; k < 12; ++k) sum = _mm512_add_epi32(sum, acc[k]);
  alignas(64) int32_t sink[16];
  _mm512_store_si512(sink, sum);
  asm volatile("" : : "r"(sink) : "memory");
  return uint64_t(steps) * 12 * 128;
}

bool Int8RoofIsVnni() { return Int8KernelTarget() == HWY_AVX3_DL; }
#else
bool ComputeRoofAvailable() { return false; }
uint64_t FmaRoofSteps(int64_t) { return 0; }
uint64_t Fma512RoofSteps(int64_t) { return 0; }
bool FmaRoofIs512() { return false; }
uint64_t Int8RoofSteps(int64_t) { return 0; }
uint64_t Int8VnniRoofSteps(int64_t) { return 0; }
bool Int8RoofIsVnni() { return false; }
#endif

double ComputeRoofOpsPerSecond(Roof roof, size_t threads, double seconds, size_t passes) {
  if (!ComputeRoofAvailable()) return 0.0;
  using Clock = std::chrono::steady_clock;
  auto run = roof == Roof::kF32Fma ? (FmaRoofIs512() ? Fma512RoofSteps : FmaRoofSteps)
             : Int8RoofIsVnni()    ? Int8VnniRoofSteps
                                   : Int8RoofSteps;
  // Calibrate the steps for `seconds` on one thread.
  int64_t steps = 1 << 12;
  for (;;) {
    const auto start = Clock::now();
    run(steps);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (elapsed > seconds / 8 || steps > (int64_t(1) << 40)) {
      steps = std::max<int64_t>(1, int64_t(double(steps) * seconds / std::max(elapsed, 1e-9)));
      break;
    }
    steps *= 4;
  }
  threads = std::max<size_t>(threads, 1);
  std::vector<double> rates;
  for (size_t pass = 0; pass < std::max<size_t>(passes, 1); ++pass) {
    std::vector<uint64_t> ops(threads);
    std::vector<std::thread> workers;
    const auto start = Clock::now();
    for (size_t t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] { ops[t] = run(steps); });
    }
    for (std::thread& worker : workers) worker.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    uint64_t total = 0;
    for (uint64_t o : ops) total += o;
    rates.push_back(double(total) / elapsed);
  }
  return Median(rates);
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace petrel::cpu
