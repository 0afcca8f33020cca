// Split-K decode attention: the context of each (token, head) is cut into chunks
// (attn::DecodeChunkTokens), one block per chunk writes its partial (max, sum, output) to
// scratch, and a combine kernel merges the chunks in order. For batches of few tokens, where the
// context is the only parallelism there is.
#include <cstdint>

#include "cuda/attention/attention_kernels.h"
#include "cuda/attention/attention_math.cuh"
#include "cuda/attention/warp_reduce.cuh"

namespace petrel::cuda {
namespace {

constexpr int kDecodeThreads = attn::kDecodeWarps * attn::kWarpSize;
constexpr int kCombineThreads = 128;

// Scratch layout: partial outputs (n_parts, head_dim), then their (max, sum) (n_parts, 2), part
// (token * n_heads + head) * n_chunks + chunk.
struct ScratchLayout {
  int64_t n_parts;
  float* acc;
  float* stats;

  __device__ ScratchLayout(const AttentionArgs& args)
      : n_parts(int64_t(args.n_tokens) * args.params.n_heads * attn::DecodeChunks(args.max_ctx)),
        acc(static_cast<float*>(args.scratch)),
        stats(static_cast<float*>(args.scratch) + n_parts * args.params.head_dim) {}
};

// grid (chunk, head, token). Each warp takes steps of kDecodeKeysPerStep keys (lanes split the
// head), each step one tile of its own online softmax; the block then merges its warps in order.
template <attn::KvKind kKind>
__global__ void __launch_bounds__(kDecodeThreads) DecodeChunkKernel(const AttentionArgs args) {
  const AttentionParams& p = args.params;
  const int chunk = blockIdx.x, head = blockIdx.y, token = blockIdx.z;
  const int head_dim = p.head_dim;
  const int32_t n_ctx = attn::DecodeContext(args.n_ctx[token], args.max_ctx);
  const int32_t first = attn::FirstVisible(n_ctx, p.window);
  const int32_t chunk_tokens = attn::DecodeChunkTokens(args.max_ctx);
  const int32_t chunk_begin = chunk * chunk_tokens;
  const int32_t chunk_end = min(chunk_begin + chunk_tokens, n_ctx);
  // Nothing visible in this chunk: the combine kernel does not read it.
  if (chunk_end <= chunk_begin || chunk_end <= first) return;
  const int32_t key_begin = max(chunk_begin, first);

  __shared__ float q_shared[attn::kMaxHeadDim];
  __shared__ float acc_shared[attn::kDecodeWarps][attn::kMaxHeadDim];
  __shared__ attn::PartialSoftmax state_shared[attn::kDecodeWarps];
  const float* q = args.q + (int64_t(token) * p.n_heads + head) * head_dim;  // (head_dim)
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) q_shared[d] = q[d];
  __syncthreads();

  const int warp = threadIdx.x / attn::kWarpSize, lane = threadIdx.x % attn::kWarpSize;
  const int kv_head = head / (p.n_heads / p.n_kv_heads);
  const int32_t* seq_blocks = args.block_tables + args.block_table_begin[args.token_seq[token]];
  const int64_t row_bytes = attn::KvBytes(kKind, int64_t(p.n_kv_heads) * head_dim);
  const int64_t head_offset = kv_head * attn::KvBytes(kKind, head_dim);
  const uint8_t* k_cache = static_cast<const uint8_t*>(args.k_cache) + head_offset;
  const uint8_t* v_cache = static_cast<const uint8_t*>(args.v_cache) + head_offset;

  constexpr int kSteps = attn::kDecodeKeysPerStep;
  attn::PartialSoftmax state = attn::EmptyPartial();
  float acc[attn::kDimsPerLane] = {};  // dimension lane + 32 * i
  for (int32_t step_begin = key_begin + warp * kSteps; step_begin < chunk_end;
       step_begin += attn::kDecodeWarps * kSteps) {
    // The step's keys: dot products summed per lane, then one butterfly each.
    const uint8_t* v_heads[kSteps];
    float scores[kSteps];
#pragma unroll
    for (int key = 0; key < kSteps; ++key) {
      const int32_t kv_pos = step_begin + key;
      float dot = 0.0f;
      v_heads[key] = nullptr;
      if (kv_pos < chunk_end) {
        const int64_t offset =
            attn::SlotOfPosition(seq_blocks, args.block_tokens, kv_pos) * row_bytes;
        const uint8_t* k_head = k_cache + offset;
        v_heads[key] = v_cache + offset;
#pragma unroll
        for (int i = 0; i < attn::kDimsPerLane; ++i) {
          const int d = lane + i * attn::kWarpSize;
          if (d < head_dim) dot += q_shared[d] * attn::LoadKv<kKind>(k_head, d);
        }
      }
      scores[key] = dot;
    }
    float step_max = -INFINITY;
#pragma unroll
    for (int key = 0; key < kSteps; ++key) {
      const float dot = WarpSum(scores[key]);
      scores[key] =
          v_heads[key] != nullptr ? attn::ScoreOf(dot, p.scale, p.logit_softcap) : -INFINITY;
      step_max = fmaxf(step_max, scores[key]);
    }
    // The step as one tile of the online softmax (its first key is always visible).
    const float correction = attn::BeginTile(state, step_max);
    float weights[kSteps];
#pragma unroll
    for (int key = 0; key < kSteps; ++key) {
      weights[key] = attn::TileWeight(state, scores[key]);
      state.sum += weights[key];
    }
#pragma unroll
    for (int i = 0; i < attn::kDimsPerLane; ++i) {
      const int d = lane + i * attn::kWarpSize;
      if (d >= head_dim) continue;
      float value = acc[i] * correction;
#pragma unroll
      for (int key = 0; key < kSteps; ++key) {
        if (v_heads[key] != nullptr) value += weights[key] * attn::LoadKv<kKind>(v_heads[key], d);
      }
      acc[i] = value;
    }
  }
#pragma unroll
  for (int i = 0; i < attn::kDimsPerLane; ++i) {
    const int d = lane + i * attn::kWarpSize;
    if (d < head_dim) acc_shared[warp][d] = acc[i];
  }
  if (lane == 0) state_shared[warp] = state;
  __syncthreads();

  // The warps' partials merged in warp order (a warp without keys is empty and merges as 0).
  const ScratchLayout scratch(args);
  const int64_t part =
      (int64_t(token) * p.n_heads + head) * attn::DecodeChunks(args.max_ctx) + chunk;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    attn::PartialSoftmax merged = state_shared[0];
    float value = acc_shared[0][d];
#pragma unroll
    for (int w = 1; w < attn::kDecodeWarps; ++w) {
      const attn::MergeFactors factors = attn::MergePartials(merged, state_shared[w]);
      value = value * factors.into + acc_shared[w][d] * factors.from;
    }
    scratch.acc[part * head_dim + d] = value;
    if (d == 0) {
      scratch.stats[2 * part] = merged.max;
      scratch.stats[2 * part + 1] = merged.sum;
    }
  }
}

// grid (head, token): merges the token's chunks that hold visible keys, in chunk order, and
// writes the normalised output.
__global__ void __launch_bounds__(kCombineThreads) CombineChunksKernel(const AttentionArgs args) {
  const AttentionParams& p = args.params;
  const int head = blockIdx.x, token = blockIdx.y;
  const int head_dim = p.head_dim;
  const int32_t n_ctx = attn::DecodeContext(args.n_ctx[token], args.max_ctx);
  const int32_t first = attn::FirstVisible(n_ctx, p.window);
  const int32_t chunk_tokens = attn::DecodeChunkTokens(args.max_ctx);
  const int32_t chunk_begin = first / chunk_tokens;
  const int32_t chunk_end = (n_ctx + chunk_tokens - 1) / chunk_tokens;
  const ScratchLayout scratch(args);
  const int64_t first_part = (int64_t(token) * p.n_heads + head) * attn::DecodeChunks(args.max_ctx);
  float* out = args.out + (int64_t(token) * p.n_heads + head) * head_dim;  // (head_dim)
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    attn::PartialSoftmax merged = attn::EmptyPartial();
    float value = 0.0f;
    for (int32_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      const int64_t part = first_part + chunk;
      const attn::PartialSoftmax partial = {scratch.stats[2 * part], scratch.stats[2 * part + 1]};
      const attn::MergeFactors factors = attn::MergePartials(merged, partial);
      value = value * factors.into + scratch.acc[part * head_dim + d] * factors.from;
    }
    out[d] = value * attn::OutputFactor(merged);
  }
}

template <attn::KvKind kKind>
cudaError_t LaunchFor(cudaStream_t stream, const AttentionArgs& args) {
  const dim3 chunk_grid(unsigned(attn::DecodeChunks(args.max_ctx)), unsigned(args.params.n_heads),
                        unsigned(args.n_tokens));
  DecodeChunkKernel<kKind><<<chunk_grid, kDecodeThreads, 0, stream>>>(args);
  if (const cudaError_t error = cudaGetLastError(); error != cudaSuccess) return error;
  const dim3 combine_grid(unsigned(args.params.n_heads), unsigned(args.n_tokens));
  CombineChunksKernel<<<combine_grid, kCombineThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSplitKDecode(cudaStream_t stream, const AttentionArgs& args, attn::KvKind kind) {
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
