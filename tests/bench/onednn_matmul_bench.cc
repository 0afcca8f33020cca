// Prompt-shaped F16/BF16 mat_mul: oneDNN's matmul against petrel's kernels on the tinyllama
// shapes (512 tokens; q/o, k/v, gate/up, down), one thread each, passes interleaved, GFLOP/s of
// thread CPU time.
// The figures behind "oneDNN where it pays" in docs/PERFORMANCE.md. Built when libdnnl is found;
// run with OMP_NUM_THREADS=1 (oneDNN's threads) and optionally the number of passes:
//   OMP_NUM_THREADS=1 build/tests/onednn_matmul_bench [PASSES]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.h"           // CpuKernels, CpuKernelsWithBf16Dot
#include "cpu/matmul/bf16_dot.h"   // Bf16DotSupported
#include "oneapi/dnnl/dnnl.hpp"
#include "quant/f16.h"             // F32ToF16, F32ToBF16, F16ToF32

namespace petrel {
namespace {

using dnnl::memory;

struct Shape {
  const char* name;
  size_t n_in;  // K
  size_t rows;  // N
};
constexpr size_t kTokens = 512;  // M
constexpr Shape kShapes[] = {
    {"q/o 2048x2048", 2048, 2048},
    {"k/v 2048x256", 2048, 256},
    {"gate/up 2048x5632", 2048, 5632},
    {"down 5632x2048", 5632, 2048},
};

// One way to compute out (kTokens, rows) = x (kTokens, n_in) . W^T; `run` is the timed call.
struct Variant {
  std::string name;
  std::function<void()> run;
  std::vector<double> gflops;  // one median per pass
};

// This thread's CPU time: on a host shared with other work, wall time mostly measures the
// scheduler (one thread each, so CPU time is the kernel's own).
double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double MedianSeconds(const std::function<void()>& run, int reps) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double start = ThreadSeconds();
    run();
    t.push_back(ThreadSeconds() - start);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// oneDNN matmul src (M, K) of `src_type`, weights stored (N, K) as petrel's rows (tag `ba` of a
// (K, N) matrix) of `w_type`, or reordered once into oneDNN's own layout (`repack`), dst f32.
struct OneDnnMatMul {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul prim;
  memory src, weights, dst;
  std::string impl;

  bool Init(const Shape& s, memory::data_type src_type, memory::data_type w_type,
            const void* x_data, const void* w_data, bool repack, size_t tokens = kTokens) {
    using dt = memory::data_type;
    using tag = memory::format_tag;
    const memory::dim m = memory::dim(tokens), k = memory::dim(s.n_in), n = memory::dim(s.rows);
    const memory::desc src_md({m, k}, src_type, tag::ab);
    const memory::desc w_user_md({k, n}, w_type, tag::ba);
    const memory::desc w_md = repack ? memory::desc({k, n}, w_type, tag::any) : w_user_md;
    const memory::desc dst_md({m, n}, dt::f32, tag::ab);
    try {
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, w_md, dst_md), engine);
      impl = pd.impl_info_str();
      prim = dnnl::matmul(pd);
      src = memory(src_md, engine, const_cast<void*>(x_data));
      memory w_user(w_user_md, engine, const_cast<void*>(w_data));
      if (pd.weights_desc() != w_user_md) {
        weights = memory(pd.weights_desc(), engine);
        dnnl::reorder(w_user, weights).execute(stream, w_user, weights);
        stream.wait();
      } else {
        weights = w_user;
      }
      dst = memory(dst_md, engine);
    } catch (const dnnl::error& e) {
      impl = std::string("unavailable: ") + e.what();
      return false;
    }
    return true;
  }
  void Run() {
    prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    stream.wait();
  }
};

int Main(int passes) {
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::printf("one thread each (OMP_NUM_THREADS=%s), %zu tokens, %d passes interleaved; "
              "thread CPU time, median of 3 calls per pass, then the median (min-max) over "
              "passes\n",
              std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "unset", kTokens,
              passes);
  for (const Shape& s : kShapes) {
    std::vector<float> x(kTokens * s.n_in), w(s.rows * s.n_in), out(kTokens * s.rows);
    for (float& v : x) v = normal(gen);
    for (float& v : w) v = normal(gen) * 0.05f;
    std::vector<uint16_t> w_bf16(w.size()), w_f16(w.size()), x_bf16(x.size());
    std::vector<float> w_f16_widened(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w_bf16[i] = F32ToBF16(w[i]);
      w_f16[i] = F32ToF16(w[i]);
      w_f16_widened[i] = F16ToF32(w_f16[i]);
    }
    for (size_t i = 0; i < x.size(); ++i) x_bf16[i] = F32ToBF16(x[i]);

    std::vector<Variant> variants;
    auto add_petrel = [&](const char* name, const HostKernels& kernels, DType type,
                          const void* weights) {
      variants.push_back({name, [&, type, weights, k = &kernels] {
                            k->mat_mul(type, weights, s.n_in * 2, s.n_in, x.data(), s.n_in,
                                       kTokens, nullptr, out.data(), s.rows, 0, s.rows);
                          }, {}});
    };
    add_petrel("petrel BF16, f32 tiles", cpu::CpuKernels(), DType::kBF16, w_bf16.data());
    if (cpu::Bf16DotSupported()) {
      add_petrel("petrel BF16, bf16 dot", cpu::CpuKernelsWithBf16Dot(true), DType::kBF16,
                 w_bf16.data());
    }
    add_petrel("petrel F16, f32 tiles", cpu::CpuKernels(), DType::kF16, w_f16.data());
    if (cpu::Bf16DotSupported()) {
      add_petrel("petrel F16, bf16 dot", cpu::CpuKernelsWithBf16Dot(true), DType::kF16, w_f16.data());
    }
    using dt = memory::data_type;
    std::vector<std::unique_ptr<OneDnnMatMul>> onednn;
    auto add_onednn = [&](const std::string& name, dt src_type, dt w_type, const void* x_data,
                          const void* w_data, bool repack) {
      auto mm = std::make_unique<OneDnnMatMul>();
      const bool ok = mm->Init(s, src_type, w_type, x_data, w_data, repack);
      std::printf("  %-18s %-44s %s\n", s.name, name.c_str(), mm->impl.c_str());
      if (!ok) return;
      OneDnnMatMul* raw = mm.get();
      variants.push_back({name, [raw] { raw->Run(); }, {}});
      onednn.push_back(std::move(mm));
    };
    add_onednn("oneDNN bf16 x bf16, rows as stored", dt::bf16, dt::bf16, x_bf16.data(),
               w_bf16.data(), false);
    add_onednn("oneDNN bf16 x bf16, repacked", dt::bf16, dt::bf16, x_bf16.data(), w_bf16.data(),
               true);
    add_onednn("oneDNN f32 x bf16, rows as stored", dt::f32, dt::bf16, x.data(), w_bf16.data(),
               false);
    add_onednn("oneDNN f32 x f16, rows as stored", dt::f32, dt::f16, x.data(), w_f16.data(),
               false);
    add_onednn("oneDNN f16 x f16, rows as stored", dt::f16, dt::f16, x.data(), w_f16.data(),
               false);
    add_onednn("oneDNN f32 x F16 widened to f32, repacked", dt::f32, dt::f32, x.data(),
               w_f16_widened.data(), true);

    // Batch invariance: the first token's row computed alone against the same token in the
    // 512-token product (oneDNN's bf16 matmul, weights as stored).
    {
      OneDnnMatMul alone, batch;
      const Shape one = s;
      if (alone.Init(one, dt::bf16, dt::bf16, x_bf16.data(), w_bf16.data(), false, 1) &&
          batch.Init(one, dt::bf16, dt::bf16, x_bf16.data(), w_bf16.data(), false, kTokens)) {
        alone.Run();
        batch.Run();
        const float* a = static_cast<const float*>(alone.dst.get_data_handle());
        const float* b = static_cast<const float*>(batch.dst.get_data_handle());
        size_t differ = 0;
        for (size_t r = 0; r < s.rows; ++r) differ += a[r] != b[r];
        std::printf("  %-18s oneDNN bf16, 1 token alone (%s) against 512: %zu of %zu outputs differ\n",
                    s.name, alone.impl.c_str(), differ, s.rows);
      }
    }
    const double flop = 2.0 * double(kTokens) * double(s.n_in) * double(s.rows);
    for (Variant& v : variants) v.run();  // warm up
    for (int pass = 0; pass < passes; ++pass) {
      for (Variant& v : variants) v.gflops.push_back(flop / MedianSeconds(v.run, 3) * 1e-9);
    }
    std::printf("| %s | GFLOP/s median (min-max) |\n", s.name);
    for (Variant& v : variants) {
      std::vector<double> g = v.gflops;
      std::sort(g.begin(), g.end());
      std::printf("| %-44s | %.1f (%.1f-%.1f) |\n", v.name.c_str(), g[g.size() / 2], g.front(),
                  g.back());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace petrel

int main(int argc, char** argv) { return petrel::Main(argc > 1 ? std::atoi(argv[1]) : 3); }
