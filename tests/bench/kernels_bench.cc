// mat_mul throughput for one token (decode): weight bytes read per second, f32/f16/bf16.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "ref/reference_kernels.h"

namespace petrel {
namespace {

// Args: rows, n_in, threads.
void BM_MatMul(benchmark::State& state, DType type) {
  const size_t rows = size_t(state.range(0)), n_in = size_t(state.range(1));
  const size_t n_threads = size_t(state.range(2));
  const size_t elem_bytes = type == DType::kF32 ? 4 : 2;
  const size_t row_bytes = n_in * elem_bytes;
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> row(n_in), x(n_in), out(rows);
  std::vector<uint8_t> w(rows * row_bytes);
  for (size_t r = 0; r < rows; ++r) {
    for (float& v : row) v = uniform(gen);
    ref::ReferenceKernels().row_from_f32(type, row.data(), n_in, w.data() + r * row_bytes);
  }
  for (float& v : x) v = uniform(gen);
  const HostKernels& kernels = cpu::CpuKernels();
  cpu::ThreadPool pool(n_threads);
  const size_t n_chunks = (rows + 3) / 4;  // split on 4-row blocks
  for (auto _ : state) {
    pool.ParallelFor(n_chunks, [&](size_t begin, size_t end) {
      kernels.mat_mul(type, w.data(), row_bytes, n_in, x.data(), n_in, 1, nullptr, out.data(), rows,
                      begin * 4, std::min(end * 4, rows));
    });
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(rows * row_bytes));
}

void Shapes(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"rows", "n_in", "threads"});
  for (int64_t threads : {1, 2}) {
    bench->Args({2048, 2048, threads});
    bench->Args({5632, 2048, threads});
  }
  bench->UseRealTime();
}

BENCHMARK_CAPTURE(BM_MatMul, f32, DType::kF32)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_MatMul, f16, DType::kF16)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_MatMul, bf16, DType::kBF16)->Apply(Shapes);

}  // namespace
}  // namespace petrel

BENCHMARK_MAIN();
