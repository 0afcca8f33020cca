// The arithmetic of the CUDA attention kernels: KV slot lookup, visibility, soft-cap, KV element
// conversion (F32, F16, Q8_0), the online-softmax updates and the merge of partial results, and
// how the kernels cut the work (split-K chunks, prefill tiles). Everything here is `PETREL_HD`,
// so the host compiler builds it too and tests/cuda_attention_math_test.cc runs the kernels'
// exact decomposition on machines without a GPU. No CUDA header is needed outside nvcc.
#pragma once

#include <math.h>  // expf, tanhf, roundf, fabsf, fmaxf, INFINITY (host and device)

#include <cstdint>

#include "cuda/kernels_common.cuh"  // PETREL_HD

#if defined(__CUDACC__)
#include <cuda_fp16.h>  // __float2half_rn, __half2float (host and device)
#else
#include "quant/f16.h"  // F32ToF16, F16ToF32
#endif

namespace petrel::cuda::attn {

// The KV cache element types with kernels, as a template argument of the kernels.
enum class KvKind : int { kF32, kF16, kQ8_0 };

// Q8_0 as quant/blocks.h's BlockQ8_0: an f16 scale, then 32 int8 levels; 34 bytes, so a block's
// scale is 2-byte aligned and its levels are read byte by byte.
constexpr int kQ8BlockElems = 32;
constexpr int kQ8BlockBytes = 34;

// The largest head the kernels take: the per-lane accumulators are sized for it (kMaxHeadDim / 32
// floats per query row and lane).
constexpr int kMaxHeadDim = 256;
constexpr int kWarpSize = 32;
constexpr int kDimsPerLane = kMaxHeadDim / kWarpSize;

// Split-K decode is used for batches of at most kDecodeMaxTokens tokens (a decode step of up to
// that many sequences, a short verification batch); larger batches take the tiled prefill kernel.
constexpr int kDecodeMaxTokens = 32;
// A decode block is kDecodeWarps warps over one chunk of one (token, head). The chunk's visible
// keys are cut into steps of kDecodeKeysPerStep consecutive keys (the last one short); warp w
// takes steps w, w + kDecodeWarps, ... in order, with its own partial softmax. A step's K and V
// rows are loaded together, so that each warp has that many rows in flight.
constexpr int kDecodeWarps = 4;
constexpr int kDecodeKeysPerStep = 8;
// The context is cut into at most kDecodeMaxChunks chunks of a multiple of kDecodeChunkGrain
// positions: enough blocks to fill a GPU for one token, and a bounded scratch.
constexpr int kDecodeMaxChunks = 16;
constexpr int kDecodeChunkGrain = 64;

// The prefill kernel: a block is kPrefillWarps warps over kPrefillQueries consecutive tokens of
// one head (kPrefillRowsPerWarp query rows per warp), walking key tiles that start at multiples
// of PrefillKeyTile(head_dim) positions.
constexpr int kPrefillWarps = 4;
constexpr int kPrefillRowsPerWarp = 4;
constexpr int kPrefillQueries = kPrefillWarps * kPrefillRowsPerWarp;

// Positions per split-K chunk for a batch whose longest context is `max_ctx`.
PETREL_HD int32_t DecodeChunkTokens(int32_t max_ctx) {
  const int32_t per_chunk = (max_ctx + kDecodeMaxChunks - 1) / kDecodeMaxChunks;
  const int32_t grains = (per_chunk + kDecodeChunkGrain - 1) / kDecodeChunkGrain;
  return (grains > 0 ? grains : 1) * kDecodeChunkGrain;
}

PETREL_HD int32_t DecodeChunks(int32_t max_ctx) {
  const int32_t chunk_tokens = DecodeChunkTokens(max_ctx);
  return (max_ctx + chunk_tokens - 1) / chunk_tokens;
}

// The positions a decode token attends, bounded by the batch's max_ctx so that a malformed
// n_ctx can never address chunks past the scratch.
PETREL_HD int32_t DecodeContext(int32_t n_ctx, int32_t max_ctx) {
  return n_ctx < 0 ? 0 : n_ctx < max_ctx ? n_ctx : max_ctx;
}

// Floats of split-K scratch: per (token, head, chunk) a partial output of head_dim values, and
// its max and sum.
PETREL_HD int64_t DecodeScratchFloats(int32_t n_tokens, int32_t n_heads, int32_t max_ctx,
                                      int32_t head_dim) {
  return int64_t(n_tokens) * n_heads * DecodeChunks(max_ctx) * (int64_t(head_dim) + 2);
}

// Keys per prefill tile: 32 (one per lane when scoring) up to head_dim 128; 16 above, so that
// the Q, K and V tiles fit the 64 KiB of shared memory a block may have on compute capability 7.5.
PETREL_HD int PrefillKeyTile(int head_dim) { return head_dim <= 128 ? 32 : 16; }

// Shared memory of a prefill block: the queries (kPrefillQueries, head_dim), the K tile
// (key_tile, head_dim + 1) padded so that lanes reading different keys hit different banks, and
// the V tile (key_tile, head_dim).
PETREL_HD int64_t PrefillSharedBytes(int head_dim) {
  const int64_t key_tile = PrefillKeyTile(head_dim);
  return int64_t(sizeof(float)) *
         (int64_t(kPrefillQueries) * head_dim + key_tile * (head_dim + 1) + key_tile * head_dim);
}

// --- Where keys live, and which are visible -----------------------------------------------------

// The flat slot (block * block_tokens + offset) of position `kv_pos` of a sequence whose blocks,
// in position order, are `seq_blocks`.
PETREL_HD int64_t SlotOfPosition(const int32_t* seq_blocks, int32_t block_tokens, int32_t kv_pos) {
  return int64_t(seq_blocks[kv_pos / block_tokens]) * block_tokens + kv_pos % block_tokens;
}

// The first position a query with `n_ctx` positions sees: the window's start, or 0. It sees
// [FirstVisible, n_ctx).
PETREL_HD int32_t FirstVisible(int32_t n_ctx, int32_t window) {
  return window > 0 && n_ctx > window ? n_ctx - window : 0;
}

// The score of a key from its dot product with the query: scaled, then soft-capped.
PETREL_HD float ScoreOf(float dot, float scale, float softcap) {
  const float scaled = dot * scale;
  return softcap > 0.0f ? softcap * tanhf(scaled / softcap) : scaled;
}

// --- KV elements --------------------------------------------------------------------------------

PETREL_HD float HalfToFloat(uint16_t bits) {
#if defined(__CUDACC__)
  return __half2float(__ushort_as_half(bits));
#else
  return F16ToF32(bits);
#endif
}

// Round to nearest even, overflow to infinity: the same bits as quant's F32ToF16.
PETREL_HD uint16_t FloatToHalf(float value) {
#if defined(__CUDACC__)
  return __half_as_ushort(__float2half_rn(value));
#else
  return F32ToF16(value);
#endif
}

// Bytes of `n_elems` elements of `kind` (n_elems a multiple of 32 for Q8_0).
PETREL_HD int64_t KvBytes(KvKind kind, int64_t n_elems) {
  switch (kind) {
    case KvKind::kF32:
      return n_elems * 4;
    case KvKind::kF16:
      return n_elems * 2;
    case KvKind::kQ8_0:
      return n_elems / kQ8BlockElems * kQ8BlockBytes;
  }
  return 0;
}

// Element `i` of a K or V head slice starting at `head`, as f32 (exact, as quant's dequantizers).
template <KvKind kKind>
PETREL_HD float LoadKv(const uint8_t* head, int i) {
  if constexpr (kKind == KvKind::kF32) {
    return reinterpret_cast<const float*>(head)[i];
  } else if constexpr (kKind == KvKind::kF16) {
    return HalfToFloat(reinterpret_cast<const uint16_t*>(head)[i]);
  } else {
    const uint8_t* block = head + (i / kQ8BlockElems) * kQ8BlockBytes;
    const float scale = HalfToFloat(uint16_t(block[0] | (block[1] << 8)));
    return float(int8_t(block[2 + i % kQ8BlockElems])) * scale;
  }
}

// Elements converted together when a row is written: one for F32 and F16, a block for Q8_0.
template <KvKind kKind>
PETREL_HD int KvUnitElems() {
  return kKind == KvKind::kQ8_0 ? kQ8BlockElems : 1;
}

// One Q8_0 block of `src` (32 values) into `dst` (34 bytes): exactly quant's QuantizeQ8Block
// (scale amax / 127 stored as f16, levels round(x / scale) with halves away from zero, in f32
// with the unrounded scale), so every backend's cache holds the same bytes.
PETREL_HD void QuantizeQ8Block(const float* src, uint8_t* dst) {
  float amax = 0.0f;
  for (int j = 0; j < kQ8BlockElems; ++j) {
    const float magnitude = fabsf(src[j]);
    if (amax < magnitude) amax = magnitude;  // std::max's choice
  }
  const float scale = amax / 127;
  const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
  const uint16_t scale_bits = FloatToHalf(scale);
  dst[0] = uint8_t(scale_bits & 0xff);
  dst[1] = uint8_t(scale_bits >> 8);
  for (int j = 0; j < kQ8BlockElems; ++j) dst[2 + j] = uint8_t(int8_t(roundf(src[j] * inverse)));
}

// Converts unit `unit` of the f32 row `src` into the row `dst` of kind kKind.
template <KvKind kKind>
PETREL_HD void WriteKvUnit(const float* src, int64_t unit, uint8_t* dst) {
  if constexpr (kKind == KvKind::kF32) {
    reinterpret_cast<float*>(dst)[unit] = src[unit];
  } else if constexpr (kKind == KvKind::kF16) {
    reinterpret_cast<uint16_t*>(dst)[unit] = FloatToHalf(src[unit]);
  } else {
    QuantizeQ8Block(src + unit * kQ8BlockElems, dst + unit * kQ8BlockBytes);
  }
}

// --- Online softmax -----------------------------------------------------------------------------
// A partial result over some keys is (max, sum, acc): max of their scores, sum of
// exp(score - max), and acc = sum of exp(score - max) * V row (kept by the caller, one value per
// head dimension). The empty partial is (-inf, 0, 0).

struct PartialSoftmax {
  float max;
  float sum;
};

PETREL_HD PartialSoftmax EmptyPartial() { return {-INFINITY, 0.0f}; }

// The factor that moves a partial kept against `part_max` onto `new_max` (>= part_max): 0 for
// a partial that has seen no key (exp(-inf - -inf) would be NaN).
PETREL_HD float RescaleFactor(float part_max, float new_max) {
  return part_max == -INFINITY ? 0.0f : expf(part_max - new_max);
}

// Starts a tile of keys whose visible scores have maximum `tile_max` (-inf when none is
// visible): moves `state` onto the new max and returns the factor acc must be multiplied by.
// The caller then adds each key's TileWeight to state.sum and TileWeight * v to acc.
PETREL_HD float BeginTile(PartialSoftmax& state, float tile_max) {
  const float new_max = fmaxf(state.max, tile_max);
  const float correction = RescaleFactor(state.max, new_max);
  state.max = new_max;
  state.sum *= correction;
  return correction;
}

// The weight of a key of `score` (-inf when masked) in a tile begun by BeginTile.
PETREL_HD float TileWeight(const PartialSoftmax& state, float score) {
  return score == -INFINITY ? 0.0f : expf(score - state.max);
}

// Factors of a merge: acc = acc_into * into + acc_from * from.
struct MergeFactors {
  float into;
  float from;
};

// Merges the partial `from` into `into` (either may be empty).
PETREL_HD MergeFactors MergePartials(PartialSoftmax& into, const PartialSoftmax& from) {
  const float new_max = fmaxf(into.max, from.max);
  const MergeFactors factors = {RescaleFactor(into.max, new_max), RescaleFactor(from.max, new_max)};
  into.max = new_max;
  into.sum = into.sum * factors.into + from.sum * factors.from;
  return factors;
}

// The factor that turns acc into the output: 1 / sum (a query always sees at least its own key,
// so the sum is positive; 0 guards a malformed batch against dividing by zero).
PETREL_HD float OutputFactor(const PartialSoftmax& state) {
  return state.sum > 0.0f ? 1.0f / state.sum : 0.0f;
}

}  // namespace petrel::cuda::attn
