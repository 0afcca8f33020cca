// Prompt-shaped float mat_mul: petrel's Highway kernels (F32 and F16 weights) against the FMA roof
// and llama.cpp's F16 prompt method on the same shapes, one thread each, in GFLOP/s. The numbers
// behind the choice of the float prompt path recorded in docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>

#if defined(__x86_64__)
#include <immintrin.h>  // the llama.cpp comparison below is AVX2 code
#endif

#include <cstdint>
#include <random>
#include <vector>

#include "cpu/roofs/compute_roof.h"
#include "cpu/kernels.h"
#include "cpu/matmul/bf16_dot.h"  // Bf16DotSupported
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

// BF16 weights, as `petrel bench` runs them by default (widened to f32 tiles) and with
// `--bf16-dot on` (vdpbf16ps on bf16-rounded activations, where the CPU has AVX512-BF16).
void BM_PetrelBf16(benchmark::State& state, bool bf16_dot) {
  if (bf16_dot && !cpu::Bf16DotSupported()) {
    state.SkipWithError("no AVX512-BF16 here");
    return;
  }
  Problem p = Make(state);
  std::vector<uint16_t> w(p.w.size());
  F32ToBF16Row(p.w.data(), w.data(), w.size());
  const HostKernels& cpu = bf16_dot ? cpu::CpuKernelsWithBf16Dot(false) : cpu::CpuKernels();
  for (auto _ : state) {
    cpu.mat_mul(DType::kBF16, w.data(), p.n_in * sizeof(uint16_t), p.n_in, p.x.data(), p.n_in,
                p.n_tokens, nullptr, p.out.data(), p.rows, 0, p.rows);
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

// The roof the float kernels run against when they dispatch to AVX-512: 512-bit FMA chains.
void BM_F32FmaRoof512(benchmark::State& state) {
  if (!cpu::FmaRoofIs512()) {
    state.SkipWithError("the float kernels do not dispatch to AVX-512");
    return;
  }
  constexpr int64_t kSteps = 1 << 16;
  uint64_t ops = 0;
  for (auto _ : state) ops += cpu::Fma512RoofSteps(kSteps);
  state.counters["GFLOP/s"] = benchmark::Counter(double(ops) * 1e-9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_F32FmaRoof512)->Threads(1)->Threads(2)->UseRealTime();

// llama.cpp's F16 prompt method, measured on this host: ggml rounds the activations to F16 and
// hands both matrices to llamafile's tinyBLAS, which covers the output with 4 x 3 register tiles
// on 16-register AVX2 (rows x tokens), walks the full k for each tile with both operands loaded as
// F16 and converted in the tile (7 conversions beside 12 FMAs), and reduces each accumulator at
// the end. Written from that description, single-threaded, so that petrel's float tile and the
// reference's can be compared as fractions of one roof measured on one machine (BASELINES.md's
// figures come from an AMD core, whose conversions do not compete with its FMAs).
#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) inline __m256 LoadHalf8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
__attribute__((target("avx2,fma,f16c"))) inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
template <int kRows, int kTokens>
__attribute__((target("avx2,fma,f16c"))) void HalfTiles(const uint16_t* w, const uint16_t* x,
                                                         size_t n_in, size_t rows, size_t t0,
                                                         size_t t1, float* out) {
  for (size_t r = 0; r + kRows <= rows; r += kRows) {
    for (size_t t = t0; t + kTokens <= t1; t += kTokens) {
      __m256 acc[kTokens][kRows];
      for (int j = 0; j < kTokens; ++j) {
        for (int i = 0; i < kRows; ++i) acc[j][i] = _mm256_setzero_ps();
      }
      for (size_t k = 0; k < n_in; k += 8) {
        __m256 xv[kTokens];
        for (int j = 0; j < kTokens; ++j) xv[j] = LoadHalf8(x + (t + j) * n_in + k);
        for (int i = 0; i < kRows; ++i) {
          const __m256 wv = LoadHalf8(w + (r + i) * n_in + k);
          for (int j = 0; j < kTokens; ++j) acc[j][i] = _mm256_fmadd_ps(wv, xv[j], acc[j][i]);
        }
      }
      for (int j = 0; j < kTokens; ++j) {
        for (int i = 0; i < kRows; ++i) out[(t + j) * rows + r + i] = Sum8(acc[j][i]);
      }
    }
  }
}

void BM_TinyBlasMethodF16(benchmark::State& state) {
  Problem p = Make(state);
  std::vector<uint16_t> x16(p.x.size());
  for (auto _ : state) {
    for (size_t i = 0; i < p.x.size(); ++i) x16[i] = F32ToF16(p.x[i]);  // ggml's from_float
    const size_t bulk = p.n_tokens / 3 * 3;
    HalfTiles<4, 3>(p.w16.data(), x16.data(), p.n_in, p.rows, 0, bulk, p.out.data());
    if (bulk < p.n_tokens) {
      HalfTiles<4, 1>(p.w16.data(), x16.data(), p.n_in, p.rows, bulk, p.n_tokens, p.out.data());
    }
    benchmark::DoNotOptimize(p.out.data());
  }
  SetRate(state, p);
}
#endif

void Shapes(benchmark::internal::Benchmark* b) {
  // tinyllama's shapes, then the small shape's (rows of 768 and 2048).
  b->Args({2048, 2048, 128})->Args({2048, 2048, 512})->Args({5632, 2048, 128})->Args({2048, 5632, 128});
  b->Args({768, 768, 128})->Args({2048, 768, 128})->Args({768, 2048, 128});
  b->UseRealTime();
}
BENCHMARK_CAPTURE(BM_Petrel, F32, DType::kF32)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_Petrel, F16, DType::kF16)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_PetrelBf16, f32_tiles, false)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_PetrelBf16, bf16_dot, true)->Apply(Shapes);
#if defined(__x86_64__)
BENCHMARK(BM_TinyBlasMethodF16)->Apply(Shapes);
#endif

// Short batches (a speculative verification, a few decoding sequences) on a matrix far larger
// than the caches (an output head): bound by reading the weights once, so the time per call
// should barely grow with the token count. Reports the weights' read rate too.
void BM_PetrelShort(benchmark::State& state, DType type) {
  BM_Petrel(state, type);
  const size_t rows = size_t(state.range(0)), n_in = size_t(state.range(1));
  state.counters["weight GB/s"] =
      benchmark::Counter(double(state.iterations()) * double(rows * *RowBytes(type, n_in)) * 1e-9,
                         benchmark::Counter::kIsRate);
}
void ShortShapes(benchmark::internal::Benchmark* b) {
  for (int64_t tokens : {1, 2, 3, 4, 5, 8}) b->Args({32000, 2048, tokens});
  b->UseRealTime();
}
BENCHMARK_CAPTURE(BM_PetrelShort, F16, DType::kF16)->Apply(ShortShapes);
BENCHMARK_CAPTURE(BM_PetrelShort, F32, DType::kF32)->Apply(ShortShapes);

}  // namespace
}  // namespace petrel

BENCHMARK_MAIN();
