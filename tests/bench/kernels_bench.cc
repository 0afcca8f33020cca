// mat_mul throughput for one token (decode): weight bytes read per second, f32/f16/bf16;
// attention over an F16 KV cache: a 512-token prompt and one decode token at depth 512; and
// decode attention at depth as the engine runs it (split-K, GQA), in K/V bytes read per second.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu/attention/attention_split.h"
#include "cpu/kernels.h"
#include "cpu/threading/thread_pool.h"
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

// One layer's attention for `tokens` query tokens of one sequence after `depth` cached
// positions, split like HostBackend does: items of up to 16 tokens x one KV head, costliest
// first. Shape of a small llama: 12 heads (no GQA), head_dim 64, F16 cache, 16-token blocks.
// Args: tokens, depth, threads. GFLOP/s counts 4 * head_dim flops per (query, head, key).
void BM_Attention(benchmark::State& state) {
  const size_t n_tokens = size_t(state.range(0)), depth = size_t(state.range(1));
  const size_t n_threads = size_t(state.range(2));
  const size_t n_heads = 12, n_kv_heads = 12, head_dim = 64, block_tokens = 16;
  const size_t queries_per_item = 16;
  const size_t row_elems = n_kv_heads * head_dim;
  const size_t row_bytes = row_elems * 2;  // f16
  const size_t n_blocks = (depth + n_tokens + block_tokens - 1) / block_tokens;
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<uint8_t> k_cache(n_blocks * block_tokens * row_bytes), v_cache(k_cache.size());
  std::vector<float> row(row_elems);
  for (std::vector<uint8_t>* cache : {&k_cache, &v_cache}) {
    for (size_t r = 0; r < n_blocks * block_tokens; ++r) {
      for (float& x : row) x = uniform(gen);
      ref::ReferenceKernels().row_from_f32(DType::kF16, row.data(), row_elems,
                                           cache->data() + r * row_bytes);
    }
  }
  std::vector<int32_t> block_table(n_blocks);
  for (size_t b = 0; b < n_blocks; ++b) block_table[b] = int32_t(b);
  const PagedKvView kv = {.k = k_cache.data(),
                          .v = v_cache.data(),
                          .dtype = DType::kF16,
                          .block_tokens = block_tokens,
                          .row_elems = row_elems};
  const size_t q_dim = n_heads * head_dim;
  std::vector<float> q(n_tokens * q_dim), out(q.size());
  for (float& x : q) x = uniform(gen);
  std::vector<int32_t> n_ctx(n_tokens);
  double flops = 0.0;
  for (size_t t = 0; t < n_tokens; ++t) {
    n_ctx[t] = int32_t(depth + t + 1);
    flops += 4.0 * double(head_dim * n_heads) * double(n_ctx[t]);
  }
  const size_t n_chunks = (n_tokens + queries_per_item - 1) / queries_per_item;
  const HostKernels& kernels = cpu::CpuKernels();
  cpu::ThreadPool pool(n_threads);
  for (auto _ : state) {
    pool.ParallelFor(n_chunks * n_kv_heads, [&](size_t begin, size_t end) {
      for (size_t item = begin; item < end; ++item) {
        const size_t chunk = n_chunks - 1 - item / n_kv_heads;  // last (costliest) first
        const size_t kv_head = item % n_kv_heads;
        const size_t first = chunk * queries_per_item;
        const AttentionArgs args = {.q = q.data() + first * q_dim,
                                    .kv = &kv,
                                    .block_table = block_table.data(),
                                    .n_ctx = n_ctx.data() + first,
                                    .n_queries = std::min(queries_per_item, n_tokens - first),
                                    .n_heads = n_heads,
                                    .n_kv_heads = n_kv_heads,
                                    .head_dim = head_dim,
                                    .scale = 0.125f,
                                    .out = out.data() + first * q_dim};
        const size_t group = n_heads / n_kv_heads;
        kernels.attention(args, kv_head * group, (kv_head + 1) * group);
      }
    });
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["tokens/s"] = benchmark::Counter(double(n_tokens) * double(state.iterations()),
                                                  benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_Attention)
    ->ArgNames({"tokens", "depth", "threads"})
    ->Args({512, 0, 1})  // prefill of a 512-token prompt
    ->Args({512, 0, 2})
    ->Args({1, 512, 1})  // decode at depth 512
    ->Args({1, 512, 2})
    ->UseRealTime();

// One decode token's attention at `depth` in TinyLlama's shape (32 query heads, 4 KV heads of
// 64, f16 cache, 16-token blocks), split as HostBackend splits a single sequence: an item per KV
// head and split of kAttentionSplitKeys keys, in that order (a split's heads in turn), then a
// merge per KV head. Each iteration reads the next of `layers` separate caches, so that, as in a
// whole model, the K/V rows come from memory rather than from a cache level that one layer's
// rows would fit in. Args: depth, threads, layers.
void BM_DecodeAttention(benchmark::State& state) {
  const size_t depth = size_t(state.range(0)), n_threads = size_t(state.range(1));
  const size_t n_layers = size_t(state.range(2));
  const size_t n_heads = 32, n_kv_heads = 4, head_dim = 64, block_tokens = 16;
  const size_t row_elems = n_kv_heads * head_dim;
  const size_t row_bytes = row_elems * 2;  // f16
  const size_t n_ctx_value = depth + 1;
  const size_t n_blocks = (n_ctx_value + block_tokens - 1) / block_tokens;
  const size_t layer_bytes = n_blocks * block_tokens * row_bytes;
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<uint8_t> k_cache(n_layers * layer_bytes), v_cache(k_cache.size());
  uint8_t* k_data = k_cache.data();
  uint8_t* v_data = v_cache.data();
  std::vector<float> row(row_elems);
  for (uint8_t* cache : {k_data, v_data}) {
    for (size_t r = 0; r < n_layers * n_blocks * block_tokens; ++r) {
      for (float& x : row) x = uniform(gen);
      ref::ReferenceKernels().row_from_f32(DType::kF16, row.data(), row_elems,
                                           cache + r * row_bytes);
    }
  }
  std::vector<int32_t> block_table(n_blocks);
  for (size_t b = 0; b < n_blocks; ++b) block_table[b] = int32_t(b);
  const size_t q_dim = n_heads * head_dim;
  std::vector<float> q(q_dim), out(q_dim);
  for (float& x : q) x = uniform(gen);
  const int32_t n_ctx = int32_t(n_ctx_value);
  const size_t n_splits = (n_ctx_value - 1) / kAttentionSplitKeys + 1;
  std::vector<float> partials(n_splits * n_heads * AttentionPartialFloats(head_dim));
  const AttentionSplitKernels& kernels = cpu::CpuAttentionSplitKernels();
  const size_t group = n_heads / n_kv_heads;
  cpu::ThreadPool pool(n_threads);
  size_t layer = 0;
  for (auto _ : state) {
    const PagedKvView kv = {.k = k_data + layer * layer_bytes,
                            .v = v_data + layer * layer_bytes,
                            .dtype = DType::kF16,
                            .block_tokens = block_tokens,
                            .row_elems = row_elems};
    layer = (layer + 1) % n_layers;
    const AttentionArgs args = {.q = q.data(),
                                .kv = &kv,
                                .block_table = block_table.data(),
                                .n_ctx = &n_ctx,
                                .n_queries = 1,
                                .n_heads = n_heads,
                                .n_kv_heads = n_kv_heads,
                                .head_dim = head_dim,
                                .scale = 0.125f,
                                .out = out.data()};
    AttentionSplitArgs split;
    split.partials = partials.data();
    split.partial_split_stride = n_heads * AttentionPartialFloats(head_dim);
    pool.ParallelFor(n_kv_heads * n_splits, [&](size_t begin, size_t end) {
      for (size_t item = begin; item < end; ++item) {
        const size_t kv_head = item % n_kv_heads;
        AttentionSplitArgs one = split;
        one.split_begin = item / n_kv_heads;
        one.split_end = one.split_begin + 1;
        kernels.attention(args, one, kv_head * group, (kv_head + 1) * group);
      }
    });
    pool.ParallelFor(n_kv_heads, [&](size_t begin, size_t end) {
      for (size_t kv_head = begin; kv_head < end; ++kv_head) {
        kernels.merge(args, split, kv_head * group, (kv_head + 1) * group);
      }
    });
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * n_ctx_value * row_bytes));
  state.counters["GFLOP/s"] = benchmark::Counter(
      4e-9 * double(head_dim * n_heads) * double(n_ctx_value) * double(state.iterations()),
      benchmark::Counter::kIsRate);
}

BENCHMARK(BM_DecodeAttention)
    ->ArgNames({"depth", "threads", "layers"})
    ->Args({4096, 1, 22})
    ->Args({4096, 2, 22})
    ->Args({4096, 1, 1})  // one layer's rows, from cache
    ->Args({512, 1, 1})   // from L2
    ->Args({16384, 2, 22})
    ->UseRealTime();

}  // namespace
}  // namespace petrel

BENCHMARK_MAIN();
