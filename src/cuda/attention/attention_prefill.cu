// Tiled prefill attention, flash-attention style: a block takes attn::kPrefillQueries
// consecutive tokens of one head, stages their queries and then K/V tiles of
// attn::PrefillKeyTile(head_dim) keys in shared memory (converted to f32 once per tile for all
// its query rows), and keeps an online softmax per query row. The score and weighted sums run on
// CUDA cores in f32.
#include <cstdint>

#include "cuda/attention/attention_kernels.h"
#include "cuda/attention/attention_math.cuh"
#include "cuda/attention/warp_reduce.cuh"

namespace petrel::cuda {
namespace {

constexpr int kPrefillThreads = attn::kPrefillWarps * attn::kWarpSize;
constexpr int kRows = attn::kPrefillRowsPerWarp;
// Dynamic shared memory a block may use without opting in.
constexpr int64_t kDefaultSharedBytes = 48 * 1024;

// grid (token tile, head). Warp w owns query rows w * kRows .. w * kRows + kRows - 1 of the
// tile. The tile's tokens are taken in runs of one sequence (a prompt's tokens are consecutive,
// so usually one run); each run walks its sequence's key tiles, tiles starting at multiples of
// the key tile. When scoring, lane j holds key j of the tile for the warp's rows; when
// accumulating, lane l holds dimensions l, l + 32, ... of each row's output.
template <attn::KvKind kKind>
__global__ void __launch_bounds__(kPrefillThreads) PrefillKernel(const AttentionArgs args) {
  extern __shared__ float shared[];
  const AttentionParams& p = args.params;
  const int head = blockIdx.y;
  const int head_dim = p.head_dim;
  const int key_tile = attn::PrefillKeyTile(head_dim);
  float* q_tile = shared;                                     // (kPrefillQueries, head_dim)
  float* k_tile = q_tile + attn::kPrefillQueries * head_dim;  // (key_tile, head_dim + 1)
  float* v_tile = k_tile + key_tile * (head_dim + 1);         // (key_tile, head_dim)

  const int32_t token_begin = int32_t(blockIdx.x) * attn::kPrefillQueries;
  const int32_t token_end = min(token_begin + attn::kPrefillQueries, args.n_tokens);
  for (int e = threadIdx.x; e < attn::kPrefillQueries * head_dim; e += blockDim.x) {
    const int32_t token = token_begin + e / head_dim;
    q_tile[e] = token < token_end
                    ? args.q[(int64_t(token) * p.n_heads + head) * head_dim + e % head_dim]
                    : 0.0f;
  }

  const int warp = threadIdx.x / attn::kWarpSize, lane = threadIdx.x % attn::kWarpSize;
  const int kv_head = head / (p.n_heads / p.n_kv_heads);
  const int64_t row_bytes = attn::KvBytes(kKind, int64_t(p.n_kv_heads) * head_dim);
  const int64_t head_offset = kv_head * attn::KvBytes(kKind, head_dim);
  const uint8_t* k_cache = static_cast<const uint8_t*>(args.k_cache) + head_offset;
  const uint8_t* v_cache = static_cast<const uint8_t*>(args.v_cache) + head_offset;
  const float* q_rows = q_tile + warp * kRows * head_dim;  // (kRows, head_dim)

  for (int32_t run_begin = token_begin; run_begin < token_end;) {
    // The run of tokens of one sequence, and the keys any of them sees. Every thread computes
    // the same bounds, so every thread meets the same barriers.
    const int32_t seq = args.token_seq[run_begin];
    int32_t run_end = run_begin + 1;
    while (run_end < token_end && args.token_seq[run_end] == seq) ++run_end;
    int32_t key_begin = INT32_MAX, key_end = 0;
    for (int32_t token = run_begin; token < run_end; ++token) {
      const int32_t n_ctx = args.n_ctx[token];
      key_begin = min(key_begin, attn::FirstVisible(n_ctx, p.window));
      key_end = max(key_end, n_ctx);
    }
    const int32_t* seq_blocks = args.block_tables + args.block_table_begin[seq];

    bool row_active[kRows];
    int32_t row_first[kRows], row_n_ctx[kRows];
    attn::PartialSoftmax state[kRows];
    float acc[kRows][attn::kDimsPerLane];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int32_t token = token_begin + warp * kRows + r;
      row_active[r] = token >= run_begin && token < run_end;
      row_n_ctx[r] = row_active[r] ? args.n_ctx[token] : 0;
      row_first[r] = attn::FirstVisible(row_n_ctx[r], p.window);
      state[r] = attn::EmptyPartial();
#pragma unroll
      for (int i = 0; i < attn::kDimsPerLane; ++i) acc[r][i] = 0.0f;
    }

    for (int32_t tile_begin = key_begin / key_tile * key_tile; tile_begin < key_end;
         tile_begin += key_tile) {
      __syncthreads();  // the previous tile is no longer read (and the queries are written)
      for (int e = threadIdx.x; e < key_tile * head_dim; e += blockDim.x) {
        const int key = e / head_dim, d = e % head_dim;
        const int32_t kv_pos = tile_begin + key;
        float k_value = 0.0f, v_value = 0.0f;
        if (kv_pos < key_end) {
          const int64_t offset =
              attn::SlotOfPosition(seq_blocks, args.block_tokens, kv_pos) * row_bytes;
          k_value = attn::LoadKv<kKind>(k_cache + offset, d);
          v_value = attn::LoadKv<kKind>(v_cache + offset, d);
        }
        k_tile[key * (head_dim + 1) + d] = k_value;
        v_tile[key * head_dim + d] = v_value;
      }
      __syncthreads();

      // Scores of key `lane` for the warp's rows (-inf where not visible).
      float dots[kRows] = {};
      if (lane < key_tile) {
        const float* k_row = k_tile + lane * (head_dim + 1);
        for (int d = 0; d < head_dim; ++d) {
          const float k_value = k_row[d];
#pragma unroll
          for (int r = 0; r < kRows; ++r) dots[r] += q_rows[r * head_dim + d] * k_value;
        }
      }
      const int32_t kv_pos = tile_begin + lane;
      float scores[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const bool visible =
            row_active[r] && lane < key_tile && kv_pos >= row_first[r] && kv_pos < row_n_ctx[r];
        scores[r] = visible ? attn::ScoreOf(dots[r], p.scale, p.logit_softcap) : -INFINITY;
      }

      // Per row: the factor on its accumulator and its weight of key `lane`. A row that sees
      // nothing of this tile keeps factor 1 and weight 0, which leaves it as it was.
      float corrections[kRows], weights[kRows];
      bool any_visible = false;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float tile_max = WarpMax(scores[r]);
        corrections[r] = 1.0f;
        weights[r] = 0.0f;
        if (tile_max == -INFINITY) continue;
        any_visible = true;
        corrections[r] = attn::BeginTile(state[r], tile_max);
        weights[r] = attn::TileWeight(state[r], scores[r]);
        state[r].sum += WarpSum(weights[r]);
      }
      if (!any_visible) continue;  // warp-uniform
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int i = 0; i < attn::kDimsPerLane; ++i) acc[r][i] *= corrections[r];
      }
      // Each V element is read from shared memory once for the warp's rows.
      for (int key = 0; key < key_tile; ++key) {
        float key_weights[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) key_weights[r] = __shfl_sync(0xffffffffu, weights[r], key);
        const float* v_row = v_tile + key * head_dim;
#pragma unroll
        for (int i = 0; i < attn::kDimsPerLane; ++i) {
          const int d = lane + i * attn::kWarpSize;
          if (d >= head_dim) continue;
          const float v_value = v_row[d];
#pragma unroll
          for (int r = 0; r < kRows; ++r) acc[r][i] += key_weights[r] * v_value;
        }
      }
    }

#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (!row_active[r]) continue;
      const int32_t token = token_begin + warp * kRows + r;
      float* out = args.out + (int64_t(token) * p.n_heads + head) * head_dim;  // (head_dim)
      const float factor = attn::OutputFactor(state[r]);
#pragma unroll
      for (int i = 0; i < attn::kDimsPerLane; ++i) {
        const int d = lane + i * attn::kWarpSize;
        if (d < head_dim) out[d] = acc[r][i] * factor;
      }
    }
    run_begin = run_end;
  }
}

template <attn::KvKind kKind>
cudaError_t LaunchFor(cudaStream_t stream, const AttentionArgs& args) {
  const int64_t shared_bytes = attn::PrefillSharedBytes(args.params.head_dim);
  if (shared_bytes > kDefaultSharedBytes) {
    // Above 48 KiB a kernel must opt in (up to 64 KiB on 7.5, more on later GPUs).
    const cudaError_t error = cudaFuncSetAttribute(
        PrefillKernel<kKind>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes));
    if (error != cudaSuccess) return error;
  }
  const dim3 grid(unsigned((args.n_tokens + attn::kPrefillQueries - 1) / attn::kPrefillQueries),
                  unsigned(args.params.n_heads));
  PrefillKernel<kKind><<<grid, kPrefillThreads, size_t(shared_bytes), stream>>>(args);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchTiledPrefill(cudaStream_t stream, const AttentionArgs& args, attn::KvKind kind) {
  switch (kind) {
    case attn::KvKind::kF32:
      return LaunchFor<attn::KvKind::kF32>(stream, args);
    case attn::KvKind::kF16:
      return LaunchFor<attn::KvKind::kF16>(stream, args);
    case attn::KvKind::kQ8_0:
      return LaunchFor<attn::KvKind::kQ8_0>(stream, args);
  }
  return cudaErrorInvalidValue;
}

}  // namespace petrel::cuda
