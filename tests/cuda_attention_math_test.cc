// The CUDA attention kernels' arithmetic, on the host: src/cuda/attention/attention_math.cuh is
// built by the host compiler here, and a host emulation of the kernels' exact decomposition
// (split-K chunks and the warps within a chunk, prefill query tiles, sequence runs and key tiles,
// and the order every partial is merged in) is compared with the `ref` backend's attention over
// paged caches with scattered blocks; the KV write conversion is compared byte for byte with the
// CPU backend's. Runs without a GPU or the CUDA toolkit; the kernels themselves run in the `gpu`
// suite where a device exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernel_table.h"  // AttentionArgs, PagedKvView
#include "cpu/kernels.h"       // CpuKernels (row_from_f32: the CPU backend's KV write)
#include "cuda/attention/attention_math.cuh"
#include "quant/f16.h"
#include "ref/reference_kernels.h"
#include "util/paged_attention_case.h"

namespace petrel::cuda {
namespace {

using attn::KvKind;
using test::AttentionCase;
using test::Batch;
using test::DTypeOf;
using test::HeadAt;
using test::MakeBatch;
using test::MaxError;
using test::NonZero;
using test::Reference;

// DecodeChunkKernel then CombineChunksKernel (attention_decode.cu), thread block by thread block;
// a warp's dot product is summed in dimension order here (lanes, then a butterfly, on the GPU).
template <KvKind kKind>
std::vector<float> EmulateSplitK(const AttentionCase& c, const Batch& b) {
  const int head_dim = c.head_dim;
  const int32_t n_chunks = attn::DecodeChunks(b.max_ctx);
  const int32_t chunk_tokens = attn::DecodeChunkTokens(b.max_ctx);
  const int64_t n_parts = int64_t(b.n_tokens) * c.n_heads * n_chunks;
  EXPECT_EQ(size_t(attn::DecodeScratchFloats(b.n_tokens, c.n_heads, b.max_ctx, head_dim)),
            size_t(n_parts * (head_dim + 2)));
  // NaN where nothing was written: a combine that reads a skipped chunk poisons its output.
  std::vector<float> part_acc(n_parts * head_dim, NAN), part_stats(n_parts * 2, NAN);
  for (int32_t token = 0; token < b.n_tokens; ++token) {
    for (int head = 0; head < c.n_heads; ++head) {
      const float* q = b.q.data() + (int64_t(token) * c.n_heads + head) * head_dim;
      const int kv_head = head / (c.n_heads / c.n_kv_heads);
      for (int32_t chunk = 0; chunk < n_chunks; ++chunk) {
        const int32_t n_ctx = attn::DecodeContext(b.n_ctx[token], b.max_ctx);
        const int32_t first = attn::FirstVisible(n_ctx, c.window);
        const int32_t chunk_begin = chunk * chunk_tokens;
        const int32_t chunk_end = std::min(chunk_begin + chunk_tokens, n_ctx);
        if (chunk_end <= chunk_begin || chunk_end <= first) continue;
        const int32_t key_begin = std::max(chunk_begin, first);
        attn::PartialSoftmax warp_state[attn::kDecodeWarps];
        std::vector<float> warp_acc(attn::kDecodeWarps * head_dim, 0.0f);
        constexpr int kSteps = attn::kDecodeKeysPerStep;
        for (int warp = 0; warp < attn::kDecodeWarps; ++warp) {
          attn::PartialSoftmax state = attn::EmptyPartial();
          float* acc = warp_acc.data() + warp * head_dim;
          for (int32_t step_begin = key_begin + warp * kSteps; step_begin < chunk_end;
               step_begin += attn::kDecodeWarps * kSteps) {
            float scores[kSteps];
            float step_max = -INFINITY;
            for (int key = 0; key < kSteps; ++key) {
              const int32_t kv_pos = step_begin + key;
              scores[key] = -INFINITY;
              if (kv_pos >= chunk_end) continue;
              const uint8_t* k_head = HeadAt(c, b, b.k_cache, b.token_seq[token], kv_pos, kv_head);
              float dot = 0.0f;
              for (int d = 0; d < head_dim; ++d) dot += q[d] * attn::LoadKv<kKind>(k_head, d);
              scores[key] = attn::ScoreOf(dot, c.scale, c.softcap);
              step_max = std::max(step_max, scores[key]);
            }
            const float correction = attn::BeginTile(state, step_max);
            float weights[kSteps];
            for (int key = 0; key < kSteps; ++key) {
              weights[key] = attn::TileWeight(state, scores[key]);
              state.sum += weights[key];
            }
            for (int d = 0; d < head_dim; ++d) {
              float value = acc[d] * correction;
              for (int key = 0; key < kSteps; ++key) {
                const int32_t kv_pos = step_begin + key;
                if (kv_pos >= chunk_end) continue;
                const uint8_t* v_head =
                    HeadAt(c, b, b.v_cache, b.token_seq[token], kv_pos, kv_head);
                value += weights[key] * attn::LoadKv<kKind>(v_head, d);
              }
              acc[d] = value;
            }
          }
          warp_state[warp] = state;
        }
        const int64_t part = (int64_t(token) * c.n_heads + head) * n_chunks + chunk;
        for (int d = 0; d < head_dim; ++d) {
          attn::PartialSoftmax merged = warp_state[0];
          float value = warp_acc[d];
          for (int warp = 1; warp < attn::kDecodeWarps; ++warp) {
            const attn::MergeFactors factors = attn::MergePartials(merged, warp_state[warp]);
            value = value * factors.into + warp_acc[warp * head_dim + d] * factors.from;
          }
          part_acc[part * head_dim + d] = value;
          if (d == 0) {
            part_stats[2 * part] = merged.max;
            part_stats[2 * part + 1] = merged.sum;
          }
        }
      }
    }
  }
  std::vector<float> out(b.q.size());
  for (int32_t token = 0; token < b.n_tokens; ++token) {
    const int32_t n_ctx = attn::DecodeContext(b.n_ctx[token], b.max_ctx);
    const int32_t first = attn::FirstVisible(n_ctx, c.window);
    for (int head = 0; head < c.n_heads; ++head) {
      const int64_t first_part = (int64_t(token) * c.n_heads + head) * n_chunks;
      for (int d = 0; d < head_dim; ++d) {
        attn::PartialSoftmax merged = attn::EmptyPartial();
        float value = 0.0f;
        for (int32_t chunk = first / chunk_tokens;
             chunk < (n_ctx + chunk_tokens - 1) / chunk_tokens; ++chunk) {
          const int64_t part = first_part + chunk;
          const attn::PartialSoftmax partial = {part_stats[2 * part], part_stats[2 * part + 1]};
          const attn::MergeFactors factors = attn::MergePartials(merged, partial);
          value = value * factors.into + part_acc[part * head_dim + d] * factors.from;
        }
        out[(int64_t(token) * c.n_heads + head) * head_dim + d] =
            value * attn::OutputFactor(merged);
      }
    }
  }
  return out;
}

// PrefillKernel (attention_prefill.cu): query tiles of kPrefillQueries tokens, runs of one
// sequence within a tile, key tiles from the run's first visible tile to its last key; per row,
// BeginTile, the weights' sum, then acc scaled and the tile's weighted V rows added in key order.
template <KvKind kKind>
std::vector<float> EmulatePrefill(const AttentionCase& c, const Batch& b) {
  const int head_dim = c.head_dim;
  const int key_tile = attn::PrefillKeyTile(head_dim);
  std::vector<float> out(b.q.size(), NAN);
  std::vector<float> k_tile(size_t(key_tile) * head_dim), v_tile(k_tile.size());
  for (int head = 0; head < c.n_heads; ++head) {
    const int kv_head = head / (c.n_heads / c.n_kv_heads);
    for (int32_t token_begin = 0; token_begin < b.n_tokens; token_begin += attn::kPrefillQueries) {
      const int32_t token_end = std::min(token_begin + attn::kPrefillQueries, b.n_tokens);
      for (int32_t run_begin = token_begin; run_begin < token_end;) {
        const int32_t seq = b.token_seq[run_begin];
        int32_t run_end = run_begin + 1;
        while (run_end < token_end && b.token_seq[run_end] == seq) ++run_end;
        int32_t key_begin = INT32_MAX, key_end = 0;
        for (int32_t token = run_begin; token < run_end; ++token) {
          key_begin = std::min(key_begin, attn::FirstVisible(b.n_ctx[token], c.window));
          key_end = std::max(key_end, b.n_ctx[token]);
        }
        const int32_t n_rows = run_end - run_begin;
        std::vector<attn::PartialSoftmax> state(n_rows, attn::EmptyPartial());
        std::vector<float> acc(size_t(n_rows) * head_dim, 0.0f);
        for (int32_t tile_begin = key_begin / key_tile * key_tile; tile_begin < key_end;
             tile_begin += key_tile) {
          for (int key = 0; key < key_tile; ++key) {
            const int32_t kv_pos = tile_begin + key;
            for (int d = 0; d < head_dim; ++d) {
              k_tile[key * head_dim + d] =
                  kv_pos < key_end
                      ? attn::LoadKv<kKind>(HeadAt(c, b, b.k_cache, seq, kv_pos, kv_head), d)
                      : 0.0f;
              v_tile[key * head_dim + d] =
                  kv_pos < key_end
                      ? attn::LoadKv<kKind>(HeadAt(c, b, b.v_cache, seq, kv_pos, kv_head), d)
                      : 0.0f;
            }
          }
          for (int32_t row = 0; row < n_rows; ++row) {
            const int32_t token = run_begin + row;
            const float* q = b.q.data() + (int64_t(token) * c.n_heads + head) * head_dim;
            const int32_t first = attn::FirstVisible(b.n_ctx[token], c.window);
            std::vector<float> scores(key_tile);
            float tile_max = -INFINITY;
            for (int key = 0; key < key_tile; ++key) {
              const int32_t kv_pos = tile_begin + key;
              float dot = 0.0f;
              for (int d = 0; d < head_dim; ++d) dot += q[d] * k_tile[key * head_dim + d];
              const bool visible = kv_pos >= first && kv_pos < b.n_ctx[token];
              scores[key] = visible ? attn::ScoreOf(dot, c.scale, c.softcap) : -INFINITY;
              tile_max = std::max(tile_max, scores[key]);
            }
            if (tile_max == -INFINITY) continue;
            const float correction = attn::BeginTile(state[row], tile_max);
            std::vector<float> weights(key_tile);
            float weight_sum = 0.0f;
            for (int key = 0; key < key_tile; ++key) {
              weights[key] = attn::TileWeight(state[row], scores[key]);
              weight_sum += weights[key];
            }
            state[row].sum += weight_sum;
            float* row_acc = acc.data() + size_t(row) * head_dim;
            for (int d = 0; d < head_dim; ++d) row_acc[d] *= correction;
            for (int key = 0; key < key_tile; ++key)
              for (int d = 0; d < head_dim; ++d)
                row_acc[d] += weights[key] * v_tile[key * head_dim + d];
          }
        }
        for (int32_t row = 0; row < n_rows; ++row) {
          const float factor = attn::OutputFactor(state[row]);
          float* dst = out.data() + (int64_t(run_begin + row) * c.n_heads + head) * head_dim;
          for (int d = 0; d < head_dim; ++d) dst[d] = acc[size_t(row) * head_dim + d] * factor;
        }
        run_begin = run_end;
      }
    }
  }
  return out;
}

// The f32 kernels against the double reference on the same cache: outputs are convex
// combinations of V values in [-1, 1]; the f32 exps, running sums and rescalings of a few
// thousand keys stay far below this.
constexpr float kTolerance = 5e-6f;

class CudaAttentionMathTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(CudaAttentionMathTest, KvWriteMatchesCpuBackendBytes) {
  const AttentionCase& c = GetParam();
  const Batch b = MakeBatch(c, 1234);
  std::vector<uint8_t> k_cpu(b.k_cache.size(), 0), v_cpu(b.v_cache.size(), 0);
  for (size_t i = 0; i < b.written_slots.size(); ++i) {
    const size_t offset = size_t(b.written_slots[i] * b.row_bytes);
    cpu::CpuKernels().row_from_f32(DTypeOf(c.kind), b.written_k.data() + i * b.row_elems,
                                   size_t(b.row_elems), k_cpu.data() + offset);
    cpu::CpuKernels().row_from_f32(DTypeOf(c.kind), b.written_v.data() + i * b.row_elems,
                                   size_t(b.row_elems), v_cpu.data() + offset);
  }
  EXPECT_TRUE(k_cpu == b.k_cache) << "K cache bytes differ from the CPU backend's";
  EXPECT_TRUE(v_cpu == b.v_cache) << "V cache bytes differ from the CPU backend's";
}

template <KvKind kKind>
void CheckDecompositions(const AttentionCase& c, const Batch& b) {
  const std::vector<float> want = Reference(c, b);
  const float split_k_error = MaxError(EmulateSplitK<kKind>(c, b), want);
  const float prefill_error = MaxError(EmulatePrefill<kKind>(c, b), want);
  EXPECT_LE(split_k_error, kTolerance) << "split-K decode, " << b.n_tokens << " tokens";
  EXPECT_LE(prefill_error, kTolerance) << "tiled prefill, " << b.n_tokens << " tokens";
  std::printf(
      "  %s: %d tokens, max_ctx %d (%d split-K chunks of %d), max error split-K %.3g, "
      "prefill %.3g\n",
      c.name.c_str(), b.n_tokens, b.max_ctx, attn::DecodeChunks(b.max_ctx),
      attn::DecodeChunkTokens(b.max_ctx), split_k_error, prefill_error);
}

TEST_P(CudaAttentionMathTest, KernelDecompositionsMatchReference) {
  const AttentionCase& c = GetParam();
  const Batch b = MakeBatch(c, 99);
  switch (c.kind) {
    case KvKind::kF32:
      return CheckDecompositions<KvKind::kF32>(c, b);
    case KvKind::kF16:
      return CheckDecompositions<KvKind::kF16>(c, b);
    case KvKind::kQ8_0:
      return CheckDecompositions<KvKind::kQ8_0>(c, b);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaAttentionMathTest,
                         ::testing::ValuesIn(test::PagedAttentionCases()),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           return info.param.name;
                         });

// --- The pieces on their own ----------------------------------------------------------------

TEST(CudaAttentionMath, DecodeChunksCoverTheContextInBoundedGrains) {
  for (int32_t max_ctx = 1; max_ctx <= 70000; max_ctx += max_ctx < 300 ? 1 : 97) {
    const int32_t chunk_tokens = attn::DecodeChunkTokens(max_ctx);
    const int32_t n_chunks = attn::DecodeChunks(max_ctx);
    ASSERT_EQ(chunk_tokens % attn::kDecodeChunkGrain, 0) << max_ctx;
    ASSERT_LE(n_chunks, attn::kDecodeMaxChunks) << max_ctx;
    ASSERT_GE(int64_t(n_chunks) * chunk_tokens, max_ctx) << max_ctx;
    ASSERT_LT(int64_t(n_chunks - 1) * chunk_tokens, max_ctx) << max_ctx;
  }
}

TEST(CudaAttentionMath, WindowAndSlotLookup) {
  EXPECT_EQ(attn::FirstVisible(10, 0), 0);
  EXPECT_EQ(attn::FirstVisible(10, 4), 6);
  EXPECT_EQ(attn::FirstVisible(3, 4), 0);
  const int32_t blocks[] = {7, 2, 9};
  EXPECT_EQ(attn::SlotOfPosition(blocks, 5, 0), 35);
  EXPECT_EQ(attn::SlotOfPosition(blocks, 5, 6), 11);
  EXPECT_EQ(attn::SlotOfPosition(blocks, 5, 14), 49);
  EXPECT_EQ(attn::DecodeContext(500, 300), 300);
  EXPECT_EQ(attn::DecodeContext(-1, 300), 0);
}

TEST(CudaAttentionMath, MergingPartialsInAnyCutEqualsOnePass) {
  std::mt19937 rng(5);
  std::vector<float> scores(50);
  for (float& s : scores) s = NonZero(rng, 8.0f);
  // Keys one at a time, as one-key tiles.
  const auto add_key = [](attn::PartialSoftmax& state, float score) {
    attn::BeginTile(state, score);
    state.sum += attn::TileWeight(state, score);
  };
  attn::PartialSoftmax whole = attn::EmptyPartial();
  for (float s : scores) add_key(whole, s);
  double exact = 0.0;
  for (float s : scores) exact += std::exp(double(s) - double(whole.max));
  EXPECT_NEAR(whole.sum, exact, 1e-5 * exact);
  for (size_t cut = 0; cut <= scores.size(); ++cut) {
    attn::PartialSoftmax left = attn::EmptyPartial(), right = attn::EmptyPartial();
    for (size_t i = 0; i < cut; ++i) add_key(left, scores[i]);
    for (size_t i = cut; i < scores.size(); ++i) add_key(right, scores[i]);
    attn::MergePartials(left, right);
    EXPECT_EQ(left.max, whole.max) << cut;
    EXPECT_NEAR(left.sum, whole.sum, 1e-5f * whole.sum) << cut;
  }
  // Two empty partials merge into an empty one, not NaN.
  attn::PartialSoftmax empty = attn::EmptyPartial();
  const attn::MergeFactors factors = attn::MergePartials(empty, attn::EmptyPartial());
  EXPECT_EQ(factors.into, 0.0f);
  EXPECT_EQ(factors.from, 0.0f);
  EXPECT_EQ(empty.sum, 0.0f);
}

TEST(CudaAttentionMath, SoftCapBoundsScores) {
  EXPECT_EQ(attn::ScoreOf(3.0f, 0.5f, 0.0f), 1.5f);
  EXPECT_NEAR(attn::ScoreOf(1000.0f, 1.0f, 30.0f), 30.0f, 1e-5f);
  EXPECT_NEAR(attn::ScoreOf(0.3f, 1.0f, 30.0f), 30.0f * std::tanh(0.01f), 1e-7f);
}

TEST(CudaAttentionMath, Q8BlockRoundsHalvesAwayFromZeroLikeTheCpu) {
  // Values on exact halves of the scale, and a zero block.
  float block[attn::kQ8BlockElems];
  for (int j = 0; j < attn::kQ8BlockElems; ++j) block[j] = (j % 2 ? -1.0f : 1.0f) * (j + 0.5f);
  block[31] = 127.0f;  // scale exactly 1
  uint8_t got[attn::kQ8BlockBytes], want[attn::kQ8BlockBytes];
  attn::QuantizeQ8Block(block, got);
  cpu::CpuKernels().row_from_f32(DType::kQ8_0, block, attn::kQ8BlockElems, want);
  EXPECT_EQ(std::memcmp(got, want, sizeof(got)), 0);
  EXPECT_EQ(int8_t(got[2 + 2]), 3);   // 2.5 -> 3
  EXPECT_EQ(int8_t(got[2 + 3]), -4);  // -3.5 -> -4
  for (float& x : block) x = 0.0f;
  attn::QuantizeQ8Block(block, got);
  cpu::CpuKernels().row_from_f32(DType::kQ8_0, block, attn::kQ8BlockElems, want);
  EXPECT_EQ(std::memcmp(got, want, sizeof(got)), 0);
  for (int j = 0; j < attn::kQ8BlockElems; ++j)
    EXPECT_EQ(attn::LoadKv<KvKind::kQ8_0>(got, j), 0.0f);
}

}  // namespace
}  // namespace petrel::cuda
