// Quantized mat_mul throughput on one thread, with the activation rows already quantized (as
// HostBackend does once per op): for one token (decode), weight bytes read per second per
// format; for a prompt of many tokens, integer operations per second (2 per weight and token,
// against the int8 roof of ../shared/BASELINES.md).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu/roofs/compute_roof.h"
#include "cpu/kernels.h"
#include "quant/quantize.h"
#include "util/random_weights.h"  // RandomWeightRow

namespace petrel {
namespace {

// Args: rows, n_in. At 4096 x 4096 the matrix (~4-18 MB) is larger than the L2, as in a real
// decode; at 256 x 2048 (CPU time) it stays in the L2, which measures the kernel's own work.
void BM_QuantMatMul(benchmark::State& state, DType type) {
  const size_t rows = size_t(state.range(0)), n_in = size_t(state.range(1));
  const HostKernels& cpu = cpu::CpuKernels();
  const size_t row_bytes = *RowBytes(type, n_in);
  const DType act = cpu.activation_type(type);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(n_in), out(rows);
  std::vector<uint8_t> w(rows * row_bytes), xq(*RowBytes(act, n_in));
  for (size_t r = 0; r < rows; ++r) test::RandomWeightRow(type, n_in, gen, w.data() + r * row_bytes);
  for (float& v : row) v = normal(gen);
  cpu.quantize_activation(act, row.data(), n_in, xq.data());
  for (auto _ : state) {
    cpu.mat_mul_quantized(type, w.data(), row_bytes, n_in, xq.data(), xq.size(), 1, nullptr,
                          out.data(), rows, 0, rows);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.size()));
}

// Args: n_in. One token against weights read from memory, as in a model's decode: a 192 MB
// region (beyond the L3) walked one 2048-row matrix per iteration, each in the 256-row chunks
// a thread takes of tinyllama's attention products. Bytes per second of CPU time (the thread's
// own, so a loaded host still measures the kernel's stalls on memory rather than its wait).
// With ->Threads(N) each thread walks its own region, so that the sum is set against
// BM_ReadFromMemory's at the same N: the kernel's share of what plain reads get.
void BM_QuantMatVecFromMemory(benchmark::State& state, DType type) {
  const size_t n_in = size_t(state.range(0)), rows = 2048, chunk = 256;
  const HostKernels& cpu = cpu::CpuKernels();
  const size_t row_bytes = *RowBytes(type, n_in);
  const DType act = cpu.activation_type(type);
  const size_t matrix_bytes = rows * row_bytes;
  const size_t n_matrices = std::max<size_t>(2, (size_t(192) << 20) / matrix_bytes);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(n_in), out(rows);
  std::vector<uint8_t> w(n_matrices * matrix_bytes), xq(*RowBytes(act, n_in));
  for (size_t r = 0; r < rows; ++r) test::RandomWeightRow(type, n_in, gen, w.data() + r * row_bytes);
  for (size_t m = 1; m < n_matrices; ++m) {
    std::copy(w.begin(), w.begin() + matrix_bytes, w.begin() + m * matrix_bytes);
  }
  for (float& v : row) v = normal(gen);
  cpu.quantize_activation(act, row.data(), n_in, xq.data());
  size_t m = 0;
  for (auto _ : state) {
    for (size_t r = 0; r < rows; r += chunk) {
      cpu.mat_mul_quantized(type, w.data() + m * matrix_bytes, row_bytes, n_in, xq.data(),
                            xq.size(), 1, nullptr, out.data(), rows, r, r + chunk);
    }
    benchmark::DoNotOptimize(out.data());
    m = (m + 1) % n_matrices;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(matrix_bytes));
}

// The bound for BM_QuantMatVecFromMemory: the same region size read as one plain stream per
// thread (StreamRead, as `petrel bench`'s read roof does).
void BM_ReadFromMemory(benchmark::State& state) {
  const size_t bytes = size_t(192) << 20, chunk = size_t(4) << 20;
  std::vector<uint8_t> region(bytes, 1);
  size_t offset = 0;
  uint64_t sum = 0;
  for (auto _ : state) {
    sum += cpu::StreamRead(region.data() + offset, chunk);
    offset = (offset + chunk) % bytes;
  }
  benchmark::DoNotOptimize(sum);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(chunk));
}
BENCHMARK(BM_ReadFromMemory)->Threads(1)->Threads(2)->UseRealTime();

// Args: rows, n_in, tokens.
void BM_QuantMatMulPrompt(benchmark::State& state, DType type) {
  const size_t rows = size_t(state.range(0)), n_in = size_t(state.range(1));
  const size_t n_tokens = size_t(state.range(2));
  const HostKernels& cpu = cpu::CpuKernels();
  const size_t row_bytes = *RowBytes(type, n_in);
  const DType act = cpu.activation_type(type);
  const size_t xq_row_bytes = *RowBytes(act, n_in);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(n_in), out(rows * n_tokens);
  std::vector<uint8_t> w(rows * row_bytes), xq(n_tokens * xq_row_bytes);
  for (size_t r = 0; r < rows; ++r) test::RandomWeightRow(type, n_in, gen, w.data() + r * row_bytes);
  for (size_t t = 0; t < n_tokens; ++t) {
    for (float& v : row) v = normal(gen);
    cpu.quantize_activation(act, row.data(), n_in, xq.data() + t * xq_row_bytes);
  }
  for (auto _ : state) {
    cpu.mat_mul_quantized(type, w.data(), row_bytes, n_in, xq.data(), xq_row_bytes, n_tokens,
                          nullptr, out.data(), rows, 0, rows);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GOP/s"] =
      benchmark::Counter(double(state.iterations()) * 2.0 * double(rows * n_in * n_tokens) * 1e-9,
                         benchmark::Counter::kIsRate);
}

// The machine's int8 dot-product roof as ../shared/BASELINES.md measures it: independent
// chains of vpmaddubsw + vpmaddwd + convert + FMA over 32 bytes, counted as 64 operations (32
// multiply-adds). Prompt GOP/s divided by this is the fraction of the roof a format reaches.
void BM_Int8RoofAvx2(benchmark::State& state) {
  if (!cpu::ComputeRoofAvailable()) {
    state.SkipWithError("needs AVX2 and FMA");
    return;
  }
  constexpr int64_t kSteps = 1 << 16;
  uint64_t ops = 0;
  for (auto _ : state) ops += cpu::Int8RoofSteps(kSteps);
  state.counters["GOP/s"] = benchmark::Counter(double(ops) * 1e-9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Int8RoofAvx2)->Threads(1)->Threads(2)->UseRealTime();

// The int8 roof of the AVX3_DL kernels: independent chains of 512-bit vpdpbusd (64 byte
// products added four by four into int32 lanes), counted as 128 operations each; what
// `petrel bench` measures against where the integer kernels dispatch to AVX3_DL.
void BM_Int8RoofVnni(benchmark::State& state) {
  if (!cpu::Int8RoofIsVnni()) {
    state.SkipWithError("the integer kernels do not run AVX3_DL (AVX512-VNNI) here");
    return;
  }
  constexpr int64_t kSteps = 1 << 16;
  uint64_t ops = 0;
  for (auto _ : state) ops += cpu::Int8VnniRoofSteps(kSteps);
  state.counters["GOP/s"] = benchmark::Counter(double(ops) * 1e-9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Int8RoofVnni)->Threads(1)->Threads(2)->UseRealTime();

#define PETREL_QUANT_BENCH(name)                                                              \
  BENCHMARK_CAPTURE(BM_QuantMatMul, name, DType::k##name)->Args({4096, 4096})->UseRealTime(); \
  BENCHMARK_CAPTURE(BM_QuantMatMulPrompt, name, DType::k##name)                               \
      ->Args({512, 2048, 128})                                                                \
      ->UseRealTime();                                                                        \
  BENCHMARK_CAPTURE(BM_QuantMatVecFromMemory, name, DType::k##name)                           \
      ->Arg(2048)                                                                             \
      ->Threads(1)                                                                            \
      ->Threads(2)                                                                            \
      ->UseRealTime();                                                                        \
  BENCHMARK_CAPTURE(BM_QuantMatMul, name, DType::k##name)->Args({256, 2048});
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
PETREL_QUANT_BENCH(IQ1_S)
PETREL_QUANT_BENCH(IQ1_M)
PETREL_QUANT_BENCH(IQ2_XXS)
PETREL_QUANT_BENCH(IQ2_XS)
PETREL_QUANT_BENCH(IQ2_S)
PETREL_QUANT_BENCH(IQ3_XXS)
PETREL_QUANT_BENCH(IQ3_S)
PETREL_QUANT_BENCH(TQ1_0)
PETREL_QUANT_BENCH(TQ2_0)
PETREL_QUANT_BENCH(MXFP4)
PETREL_QUANT_BENCH(Q1_0)
PETREL_QUANT_BENCH(Q2_0)

}  // namespace
}  // namespace petrel

BENCHMARK_MAIN();
