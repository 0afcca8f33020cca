// Quantized mat_mul throughput for one token (decode): weight bytes read per second per format,
// on one thread, with the activation row already quantized (as HostBackend does once per op).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cpu/kernels.h"
#include "quant/quantize.h"

namespace petrel {
namespace {

// Args: rows, n_in. The matrix (~4-18 MB) is larger than the L2, as in a real decode.
void BM_QuantMatMul(benchmark::State& state, DType type) {
  const size_t rows = size_t(state.range(0)), n_in = size_t(state.range(1));
  const HostKernels& cpu = cpu::CpuKernels();
  const size_t row_bytes = *RowBytes(type, n_in);
  const DType act = cpu.activation_type(type);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(n_in), out(rows);
  std::vector<uint8_t> w(rows * row_bytes), xq(*RowBytes(act, n_in));
  for (size_t r = 0; r < rows; ++r) {
    for (float& v : row) v = normal(gen);
    QuantizeRow(type, row.data(), w.data() + r * row_bytes, n_in);
  }
  for (float& v : row) v = normal(gen);
  cpu.quantize_activation(act, row.data(), n_in, xq.data());
  for (auto _ : state) {
    cpu.mat_mul_quantized(type, w.data(), row_bytes, n_in, xq.data(), xq.size(), 1, nullptr,
                          out.data(), rows, 0, rows);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.size()));
}

#define PETREL_QUANT_BENCH(name) \
  BENCHMARK_CAPTURE(BM_QuantMatMul, name, DType::k##name)->Args({4096, 4096})->UseRealTime();
PETREL_QUANT_BENCH(Q4_0)
PETREL_QUANT_BENCH(Q4_1)
PETREL_QUANT_BENCH(Q5_0)
PETREL_QUANT_BENCH(Q5_1)
PETREL_QUANT_BENCH(Q8_0)
PETREL_QUANT_BENCH(IQ4_NL)
PETREL_QUANT_BENCH(Q2_K)
PETREL_QUANT_BENCH(Q3_K)
PETREL_QUANT_BENCH(Q4_K)
PETREL_QUANT_BENCH(Q5_K)
PETREL_QUANT_BENCH(Q6_K)
PETREL_QUANT_BENCH(IQ4_XS)

}  // namespace
}  // namespace petrel

BENCHMARK_MAIN();
