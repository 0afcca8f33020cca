// Prompt-shaped float mat_mul: petrel's Highway kernels (F32 and F16 weights) against OpenBLAS's
// cblas_sgemm on the same shapes, one thread each, in GFLOP/s. The numbers behind the choice of
// the float prompt path recorded in docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cpu/compute_roof.h"
#include "cpu/kernels.h"
#include "quant/f16.h"

namespace petrel {
namespace {

struct Problem {
  size_t rows, n_in, n_tokens;
  std::vector<float> w, x, out;
  std::vector<uint16_t> w16;
};

Problem Make(const benchmark::State& state) {
  Problem p{size_t(state.range(0)), size_t(state.range(1)), size_t(state.range(2)), {}, {}, {}, {}};
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p.w.resize(p.rows * p.n_in);
  p.x.resize(p.n_tokens * p.n_in);
  p.out.resize(p.n_tokens * p.rows);
  for (float& v : p.w) v = normal(gen);
  for (float& v : p.x) v = normal(gen);
  p.w16.resize(p.w.size());
  for (size_t i = 0; i < p.w.size(); ++i) p.w16[i] = F32ToF16(p.w[i]);
  return p;
}

void SetRate(benchmark::State& state, const Problem& p) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      double(state.iterations()) * 2.0 * double(p.rows * p.n_in * p.n_tokens) * 1e-9,
      benchmark::Counter::kIsRate);
}

// Args: rows, n_in, tokens.
void BM_Petrel(benchmark::State& state, DType type) {
  Problem p = Make(state);
  const HostKernels& cpu = cpu::CpuKernels();
  const void* w = type == DType::kF32 ? static_cast<const void*>(p.w.data()) : p.w16.data();
  const size_t row_bytes = *RowBytes(type, p.n_in);
  for (auto _ : state) {
    cpu.mat_mul(type, w, row_bytes, p.n_in, p.x.data(), p.n_in, p.n_tokens, nullptr, p.out.data(),
                p.rows, 0, p.rows);
    benchmark::DoNotOptimize(p.out.data());
  }
  SetRate(state, p);
}

// out (tokens x rows) = x (tokens x n_in) * W^T, W row-major (rows x n_in): F32 weights only
// (F16 weights would first need a converted copy).
void BM_OpenBlasSgemm(benchmark::State& state) {
  Problem p = Make(state);
  openblas_set_num_threads(1);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(p.n_tokens), int(p.rows), int(p.n_in),
                1.0f, p.x.data(), int(p.n_in), p.w.data(), int(p.n_in), 0.0f, p.out.data(),
                int(p.rows));
    benchmark::DoNotOptimize(p.out.data());
  }
  SetRate(state, p);
}

// The f32 FMA roof as ../shared/BASELINES.md measures it: independent AVX2 FMA chains.
void BM_F32FmaRoofAvx2(benchmark::State& state) {
  if (!cpu::ComputeRoofAvailable()) {
    state.SkipWithError("needs AVX2 and FMA");
    return;
  }
  constexpr int64_t kSteps = 1 << 16;
  uint64_t ops = 0;
  for (auto _ : state) ops += cpu::FmaRoofSteps(kSteps);
  state.counters["GFLOP/s"] = benchmark::Counter(double(ops) * 1e-9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_F32FmaRoofAvx2)->Threads(1)->Threads(2)->UseRealTime();

void Shapes(benchmark::internal::Benchmark* b) {
  b->Args({2048, 2048, 128})->Args({2048, 2048, 512})->Args({5632, 2048, 128})->Args({2048, 5632, 128});
  b->UseRealTime();
}
BENCHMARK_CAPTURE(BM_Petrel, F32, DType::kF32)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Petrel, F16, DType::kF16)->Apply(Shapes);
BENCHMARK(BM_OpenBlasSgemm)->Apply(Shapes);

}  // namespace
}  // namespace petrel

BENCHMARK_MAIN();
