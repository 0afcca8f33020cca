// Attention test cases over a paged KV cache, shared by the CUDA attention tests: a batch of
// several sequences whose blocks are scattered over the pool, its KV rows written by the CUDA KV
// write's per-unit conversion (attention_math.cuh), and the `ref` backend's attention over it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cpu/kernel_table.h"  // AttentionArgs, PagedKvView
#include "cuda/attention/attention_math.cuh"
#include "ref/reference_kernels.h"

namespace petrel::cuda::test {

using attn::KvKind;

inline DType DTypeOf(KvKind kind) {
  switch (kind) {
    case KvKind::kF32:
      return DType::kF32;
    case KvKind::kF16:
      return DType::kF16;
    case KvKind::kQ8_0:
      return DType::kQ8_0;
  }
  return DType::kF32;
}

// One attention node over a batch: sequences, each with `cached` positions already in the cache
// (written by earlier batches) and `fresh` tokens in this batch (their K/V written by this
// batch's KV write), attending with these parameters.
struct AttentionCase {
  std::string name;
  KvKind kind = KvKind::kF32;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f, softcap = 0.0f;
  int window = 0;
  int block_tokens = 0;
  struct Seq {
    int cached = 0, fresh = 0;
  };
  std::vector<Seq> seqs;
};

inline std::ostream& operator<<(std::ostream& os, const AttentionCase& c) { return os << c.name; }

// Uniform in [-range, range], never near zero (a zero would hide a missed scale or row).
inline float NonZero(std::mt19937& rng, float range) {
  std::uniform_real_distribution<float> dist(0.05f * range, range);
  const float magnitude = dist(rng);
  return rng() % 2 ? magnitude : -magnitude;
}

// The batch and the layer's paged cache as the backend hands them to the kernels.
struct Batch {
  int32_t n_tokens = 0, max_ctx = 0;
  int64_t row_elems = 0, row_bytes = 0;
  std::vector<float> q, k, v;  // (n_tokens, n_heads * head_dim), (n_tokens, row_elems) x2
  std::vector<int32_t> kv_slot, n_ctx, token_seq, block_tables, block_table_begin;
  std::vector<uint8_t> k_cache, v_cache;  // (n_blocks * block_tokens, row_bytes)
  // The caches before this batch's KV write (what a device starts from).
  std::vector<uint8_t> k_cache_before, v_cache_before;
  // Every row written to the cache, for the CPU comparison: slot and f32 K/V.
  std::vector<int64_t> written_slots;
  std::vector<float> written_k, written_v;
};

// The KV write kernel's per-thread work, unit by unit (KvWriteKernel in kv_write.cu).
template <KvKind kKind>
inline void WriteRow(const float* src, int64_t row_elems, uint8_t* dst) {
  for (int64_t unit = 0; unit < row_elems / attn::KvUnitElems<kKind>(); ++unit)
    attn::WriteKvUnit<kKind>(src, unit, dst);
}

inline void WriteRowAs(KvKind kind, const float* src, int64_t row_elems, uint8_t* dst) {
  switch (kind) {
    case KvKind::kF32:
      return WriteRow<KvKind::kF32>(src, row_elems, dst);
    case KvKind::kF16:
      return WriteRow<KvKind::kF16>(src, row_elems, dst);
    case KvKind::kQ8_0:
      return WriteRow<KvKind::kQ8_0>(src, row_elems, dst);
  }
}

inline Batch MakeBatch(const AttentionCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b;
  b.row_elems = int64_t(c.n_kv_heads) * c.head_dim;
  b.row_bytes = attn::KvBytes(c.kind, b.row_elems);
  // Blocks of every sequence, shuffled over the pool (with spare blocks nobody owns), so that a
  // sequence's positions jump between distant, unordered blocks.
  int n_blocks = 3;
  for (const AttentionCase::Seq& s : c.seqs)
    n_blocks += (s.cached + s.fresh + c.block_tokens - 1) / c.block_tokens;
  std::vector<int32_t> pool(n_blocks);
  for (int i = 0; i < n_blocks; ++i) pool[i] = i;
  std::shuffle(pool.begin(), pool.end(), rng);
  b.k_cache.assign(size_t(n_blocks) * c.block_tokens * b.row_bytes, 0);
  b.v_cache = b.k_cache;
  size_t next_block = 0;
  std::vector<float> k_row(b.row_elems), v_row(b.row_elems);
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const int total = c.seqs[s].cached + c.seqs[s].fresh;
    b.block_table_begin.push_back(int32_t(b.block_tables.size()));
    for (int i = 0; i < (total + c.block_tokens - 1) / c.block_tokens; ++i)
      b.block_tables.push_back(pool[next_block++]);
    const int32_t* seq_blocks = b.block_tables.data() + b.block_table_begin.back();
    for (int pos = 0; pos < total; ++pos) {
      for (int64_t i = 0; i < b.row_elems; ++i) {
        k_row[i] = NonZero(rng, 1.0f);
        v_row[i] = NonZero(rng, 1.0f);
      }
      const int64_t slot = attn::SlotOfPosition(seq_blocks, c.block_tokens, pos);
      if (pos < c.seqs[s].cached) {
        // Written by an earlier batch: straight into the cache.
        WriteRowAs(c.kind, k_row.data(), b.row_elems, b.k_cache.data() + slot * b.row_bytes);
        WriteRowAs(c.kind, v_row.data(), b.row_elems, b.v_cache.data() + slot * b.row_bytes);
      } else {
        b.k.insert(b.k.end(), k_row.begin(), k_row.end());
        b.v.insert(b.v.end(), v_row.begin(), v_row.end());
        b.kv_slot.push_back(int32_t(slot));
        b.n_ctx.push_back(pos + 1);
        b.token_seq.push_back(int32_t(s));
        b.max_ctx = std::max(b.max_ctx, pos + 1);
      }
      b.written_slots.push_back(slot);
      b.written_k.insert(b.written_k.end(), k_row.begin(), k_row.end());
      b.written_v.insert(b.written_v.end(), v_row.begin(), v_row.end());
    }
  }
  b.block_table_begin.push_back(int32_t(b.block_tables.size()));
  b.n_tokens = int32_t(b.n_ctx.size());
  // Queries a few times larger than K, so that scores spread over several units and the running
  // max moves.
  b.q.resize(size_t(b.n_tokens) * c.n_heads * c.head_dim);
  for (float& x : b.q) x = NonZero(rng, 3.0f);
  b.k_cache_before = b.k_cache;
  b.v_cache_before = b.v_cache;
  // This batch's KV write, token by token (KvWriteKernel).
  for (int32_t t = 0; t < b.n_tokens; ++t) {
    const int64_t offset = int64_t(b.kv_slot[t]) * b.row_bytes;
    WriteRowAs(c.kind, b.k.data() + t * b.row_elems, b.row_elems, b.k_cache.data() + offset);
    WriteRowAs(c.kind, b.v.data() + t * b.row_elems, b.row_elems, b.v_cache.data() + offset);
  }
  return b;
}

// The head slice of key `kv_pos` of sequence `seq` in a cache.
inline const uint8_t* HeadAt(const AttentionCase& c, const Batch& b,
                             const std::vector<uint8_t>& cache, int32_t seq, int32_t kv_pos,
                             int kv_head) {
  const int64_t slot = attn::SlotOfPosition(b.block_tables.data() + b.block_table_begin[seq],
                                            c.block_tokens, kv_pos);
  return cache.data() + slot * b.row_bytes + kv_head * attn::KvBytes(c.kind, c.head_dim);
}

// The `ref` backend's attention, token by token, over the same cache.
inline std::vector<float> Reference(const AttentionCase& c, const Batch& b) {
  const PagedKvView kv = {
      .k = const_cast<uint8_t*>(b.k_cache.data()),
      .v = const_cast<uint8_t*>(b.v_cache.data()),
      .dtype = DTypeOf(c.kind),
      .block_tokens = size_t(c.block_tokens),
      .row_elems = size_t(b.row_elems),
  };
  std::vector<float> out(b.q.size());
  for (int32_t token = 0; token < b.n_tokens; ++token) {
    petrel::AttentionArgs args;
    args.q = b.q.data() + int64_t(token) * c.n_heads * c.head_dim;
    args.kv = &kv;
    args.block_table = b.block_tables.data() + b.block_table_begin[b.token_seq[token]];
    args.n_ctx = b.n_ctx.data() + token;
    args.n_queries = 1;
    args.n_heads = size_t(c.n_heads);
    args.n_kv_heads = size_t(c.n_kv_heads);
    args.head_dim = size_t(c.head_dim);
    args.scale = c.scale;
    args.softcap = c.softcap;
    args.window = size_t(c.window);
    args.out = out.data() + int64_t(token) * c.n_heads * c.head_dim;
    ref::ReferenceKernels().attention(args, 0, size_t(c.n_heads));
  }
  return out;
}

// Largest |got - want| (NaN counts as infinite).
inline float MaxError(const std::vector<float>& got, const std::vector<float>& want) {
  float worst = 0.0f;
  for (size_t i = 0; i < got.size(); ++i) {
    const float error = std::fabs(got[i] - want[i]);
    if (!(error <= worst)) worst = std::isnan(error) ? INFINITY : error;
  }
  return worst;
}

inline AttentionCase Case(std::string name, KvKind kind, int n_heads, int n_kv_heads, int head_dim,
                          float softcap, int window, int block_tokens,
                          std::vector<AttentionCase::Seq> seqs) {
  return {.name = std::move(name),
          .kind = kind,
          .n_heads = n_heads,
          .n_kv_heads = n_kv_heads,
          .head_dim = head_dim,
          .scale = 1.0f / std::sqrt(float(head_dim)),
          .softcap = softcap,
          .window = window,
          .block_tokens = block_tokens,
          .seqs = std::move(seqs)};
}

// Block sizes (20, 12, 7, 48) divide neither the 64-position chunk grain nor the 16- and 32-key
// prefill tiles, so chunks and tiles start inside blocks; runs of several sequences share query
// tiles; windows start inside chunks and tiles.
inline std::vector<AttentionCase> PagedAttentionCases() {
  return {
      Case("f32_gqa_prompts", KvKind::kF32, 8, 2, 64, 0.0f, 0, 20, {{0, 37}, {50, 1}, {200, 20}}),
      Case("f32_decode_long", KvKind::kF32, 4, 4, 32, 0.0f, 0, 12,
           {{1500, 1}, {3, 1}, {700, 1}, {1100, 1}, {64, 1}}),
      Case("f32_head80_window", KvKind::kF32, 6, 3, 80, 0.0f, 45, 7, {{100, 19}, {0, 5}, {300, 2}}),
      Case("f16_softcap_window", KvKind::kF16, 8, 2, 128, 2.0f, 37, 20, {{90, 33}, {250, 1}}),
      Case("f16_head256_decode", KvKind::kF16, 4, 1, 256, 0.0f, 0, 48, {{1000, 2}, {333, 1}}),
      Case("q8_0_gqa_window_softcap", KvKind::kQ8_0, 8, 2, 64, 3.0f, 100, 20,
           {{0, 40}, {500, 3}, {130, 17}}),
      Case("q8_0_head256", KvKind::kQ8_0, 4, 2, 256, 0.0f, 0, 12, {{60, 21}, {240, 1}}),
      Case("q8_0_head128_many_seqs", KvKind::kQ8_0, 4, 1, 128, 0.0f, 0, 20,
           {{10, 1}, {20, 1}, {30, 3}, {0, 1}, {77, 1}, {5, 30}}),
  };
}

}  // namespace petrel::cuda::test
