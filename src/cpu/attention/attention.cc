// attention: softmax(q k^T * scale) v for query tokens of one sequence over a paged F32, F16 or
// Q8_0 KV cache, flash-attention style (tiles of keys, online softmax). Each K/V tile is loaded
// once for all the query tokens and GQA heads that read it. Optionally the scores are
// soft-capped (c·tanh(s/c)), each query sees only a window of the latest positions, and a
// per-head sink logit joins the softmax's denominator (applied once per row at the end, so the
// tile loops are the same with and without sinks).
//
// Split-K (attention_split.h): the keys are cut into splits of split_keys positions. Each row's
// state starts afresh at every split and is folded into the row's merged state (or written out as a
// partial) when the split ends; the folds run in split order. So a long context can be shared
// among threads by split (AttentionSplitKernels: partials, then the merge) with the same bits as
// one call computing every split in turn, and a context of one split computes as it always did.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/attention/attention.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/base/status.h"  // PETREL_CHECK, PETREL_DCHECK
#include "cpu/attention/attention_split.h"
#include "cpu/kernel_entry_points.h"
#include "cpu/simd/simd-inl.h"               // LoadAsF32, CopyPadded, kMaxF32Lanes
#include "hwy/contrib/math/math-inl.h"  // Exp, Tanh
#include "quant/blocks.h"               // BlockQ8_0
#include "quant/quantize.h"             // DequantizeRow

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Keys per tile of the online softmax. A tile never crosses a KV block and starts where the
// previous one ended, so tile boundaries depend only on key positions: every query sees the same
// tiles (its last one cut at its own n_ctx), whichever queries are computed with it.
constexpr size_t kKeyTile = 16;
// Keys whose dot products are reduced together by one 4x4 transpose within 128-bit blocks.
constexpr size_t kKeysPerGroup = 4;
constexpr size_t kGroupsPerTile = kKeyTile / kKeysPerGroup;

#if HWY_TARGET != HWY_SCALAR
using DBlock = hn::Full128<float>;
using VBlock = hn::Vec<DBlock>;

// Per-lane sums of a0..a3 over each 128-bit block, transposed: lane j of every block of the
// result holds that block's sum of a_j. Six shuffles and three adds replace four SumOfLanes.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V TransposeSum4(D d, V a0, V a1, V a2, V a3) {
  // 64-bit interleaves move pairs of f32 lanes. f64 lanes where the target has them: on x86
  // these are floating-point shuffles (unpcklpd), in the same domain as the adds around them;
  // u64 (integer shuffles, the same instruction count) only on 32-bit ARM NEON, which has no f64.
#if HWY_HAVE_FLOAT64
  const hn::Repartition<double, D> dd;
#else
  const hn::Repartition<uint64_t, D> dd;
#endif
  const V s01 = hn::Add(hn::InterleaveLower(d, a0, a1), hn::InterleaveUpper(d, a0, a1));
  const V s23 = hn::Add(hn::InterleaveLower(d, a2, a3), hn::InterleaveUpper(d, a2, a3));
  const V lo = hn::BitCast(d, hn::InterleaveLower(dd, hn::BitCast(dd, s01), hn::BitCast(dd, s23)));
  const V hi = hn::BitCast(d, hn::InterleaveUpper(dd, hn::BitCast(dd, s01), hn::BitCast(dd, s23)));
  return hn::Add(lo, hi);
}

// Sum of the 128-bit blocks of `v`, by halving (identity on 128-bit targets).
template <class D>
HWY_INLINE VBlock SumOfBlocks(D /*d*/, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    return v;
  } else {
    const hn::Half<D> dh;
    return SumOfBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
}

// The full vector made of consecutive 128-bit `blocks` (lowest first).
template <class D>
HWY_INLINE hn::Vec<D> JoinBlocks(D d, const VBlock* blocks) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    return blocks[0];
  } else {
    const hn::Half<D> dh;
    constexpr size_t kHalfBlocks = hn::MaxLanes(D()) / 8;
    return hn::Combine(d, JoinBlocks(dh, blocks + kHalfBlocks), JoinBlocks(dh, blocks));
  }
}

// Unscaled scores of one query row for the tile's keys, as kKeyTile / lanes vectors in key
// order. Each key's dot product is accumulated lane-wise over the head, vector by vector in
// order, then four keys at a time are reduced by TransposeSum4 and SumOfBlocks; the order
// depends only on head_dim and the target. Lanes of keys >= n_keys are unspecified: their K rows
// are never read (the last valid row stands in), and callers mask them.
template <class D, typename TK>
HWY_INLINE void TileScores(D d, const float* HWY_RESTRICT q, size_t dim_vecs,
                           const TK* HWY_RESTRICT k_rows, size_t k_stride, size_t n_keys,
                           hn::Vec<D>* scores) {
  constexpr size_t kLanes = hn::MaxLanes(D());
  const DBlock d_block;
  VBlock group_sums[kGroupsPerTile];
  for (size_t group = 0; group < kGroupsPerTile; ++group) {
    const size_t first = group * kKeysPerGroup;
    if (first >= n_keys) {
      group_sums[group] = hn::Zero(d_block);
      continue;
    }
    const TK* HWY_RESTRICT k0 = k_rows + first * k_stride;
    const TK* HWY_RESTRICT k1 = k_rows + HWY_MIN(first + 1, n_keys - 1) * k_stride;
    const TK* HWY_RESTRICT k2 = k_rows + HWY_MIN(first + 2, n_keys - 1) * k_stride;
    const TK* HWY_RESTRICT k3 = k_rows + HWY_MIN(first + 3, n_keys - 1) * k_stride;
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    for (size_t j = 0; j < dim_vecs * kLanes; j += kLanes) {
      const auto q_vec = hn::LoadU(d, q + j);
      a0 = hn::MulAdd(q_vec, LoadAsF32(d, k0 + j), a0);
      a1 = hn::MulAdd(q_vec, LoadAsF32(d, k1 + j), a1);
      a2 = hn::MulAdd(q_vec, LoadAsF32(d, k2 + j), a2);
      a3 = hn::MulAdd(q_vec, LoadAsF32(d, k3 + j), a3);
    }
    group_sums[group] = SumOfBlocks(d, TransposeSum4(d, a0, a1, a2, a3));
  }
  for (size_t i = 0; i < kKeyTile / kLanes; ++i) {
    scores[i] = JoinBlocks(d, group_sums + i * (kLanes / kKeysPerGroup));
  }
}
#else   // HWY_SCALAR: one lane, so each key's dot product is a plain chain over the head.
template <class D, typename TK>
HWY_INLINE void TileScores(D d, const float* HWY_RESTRICT q, size_t dim_vecs,
                           const TK* HWY_RESTRICT k_rows, size_t k_stride, size_t n_keys,
                           hn::Vec<D>* scores) {
  for (size_t key = 0; key < kKeyTile; ++key) {
    const TK* HWY_RESTRICT k = k_rows + HWY_MIN(key, n_keys - 1) * k_stride;
    auto acc = hn::Zero(d);
    for (size_t j = 0; j < dim_vecs; ++j)
      acc = hn::MulAdd(hn::LoadU(d, q + j), LoadAsF32(d, k + j), acc);
    scores[key] = acc;
  }
}
#endif  // HWY_TARGET != HWY_SCALAR

// The tile's weighted V rows, sum over keys [0, n_valid) of weights[key] * V row, summed apart
// from the running output (even keys in one chain, odd keys in another, added at the end), and
// then acc = acc * correction + that sum, one FMA per element. Only that FMA depends on the
// previous tile, so tiles of one row overlap in the out-of-order window (decode has one row).
// Four vectors of the head at a time stay in registers.
template <class D, typename TV>
HWY_INLINE void AccumulateValues(D d, const float* HWY_RESTRICT weights, size_t n_valid,
                                 const TV* HWY_RESTRICT v_rows, size_t v_stride, size_t dim_vecs,
                                 hn::Vec<D> correction, float* HWY_RESTRICT acc) {
  constexpr size_t kLanes = hn::MaxLanes(D());
  size_t j = 0;
  for (; j + 4 * kLanes <= dim_vecs * kLanes; j += 4 * kLanes) {
    auto e0 = hn::Zero(d), e1 = hn::Zero(d), e2 = hn::Zero(d), e3 = hn::Zero(d);
    auto o0 = hn::Zero(d), o1 = hn::Zero(d), o2 = hn::Zero(d), o3 = hn::Zero(d);
    const TV* HWY_RESTRICT v = v_rows + j;
    size_t key = 0;
    for (; key + 2 <= n_valid; key += 2, v += 2 * v_stride) {
      const auto w_even = hn::Set(d, weights[key]);
      const auto w_odd = hn::Set(d, weights[key + 1]);
      e0 = hn::MulAdd(w_even, LoadAsF32(d, v), e0);
      e1 = hn::MulAdd(w_even, LoadAsF32(d, v + kLanes), e1);
      e2 = hn::MulAdd(w_even, LoadAsF32(d, v + 2 * kLanes), e2);
      e3 = hn::MulAdd(w_even, LoadAsF32(d, v + 3 * kLanes), e3);
      o0 = hn::MulAdd(w_odd, LoadAsF32(d, v + v_stride), o0);
      o1 = hn::MulAdd(w_odd, LoadAsF32(d, v + v_stride + kLanes), o1);
      o2 = hn::MulAdd(w_odd, LoadAsF32(d, v + v_stride + 2 * kLanes), o2);
      o3 = hn::MulAdd(w_odd, LoadAsF32(d, v + v_stride + 3 * kLanes), o3);
    }
    if (key < n_valid) {
      const auto w_even = hn::Set(d, weights[key]);
      e0 = hn::MulAdd(w_even, LoadAsF32(d, v), e0);
      e1 = hn::MulAdd(w_even, LoadAsF32(d, v + kLanes), e1);
      e2 = hn::MulAdd(w_even, LoadAsF32(d, v + 2 * kLanes), e2);
      e3 = hn::MulAdd(w_even, LoadAsF32(d, v + 3 * kLanes), e3);
    }
    float* HWY_RESTRICT a = acc + j;
    hn::StoreU(hn::MulAdd(hn::LoadU(d, a), correction, hn::Add(e0, o0)), d, a);
    hn::StoreU(hn::MulAdd(hn::LoadU(d, a + kLanes), correction, hn::Add(e1, o1)), d, a + kLanes);
    hn::StoreU(hn::MulAdd(hn::LoadU(d, a + 2 * kLanes), correction, hn::Add(e2, o2)), d,
               a + 2 * kLanes);
    hn::StoreU(hn::MulAdd(hn::LoadU(d, a + 3 * kLanes), correction, hn::Add(e3, o3)), d,
               a + 3 * kLanes);
  }
  for (; j < dim_vecs * kLanes; j += kLanes) {
    auto even = hn::Zero(d), odd = hn::Zero(d);
    const TV* HWY_RESTRICT v = v_rows + j;
    size_t key = 0;
    for (; key + 2 <= n_valid; key += 2, v += 2 * v_stride) {
      even = hn::MulAdd(hn::Set(d, weights[key]), LoadAsF32(d, v), even);
      odd = hn::MulAdd(hn::Set(d, weights[key + 1]), LoadAsF32(d, v + v_stride), odd);
    }
    if (key < n_valid) even = hn::MulAdd(hn::Set(d, weights[key]), LoadAsF32(d, v), even);
    hn::StoreU(hn::MulAdd(hn::LoadU(d, acc + j), correction, hn::Add(even, odd)), d, acc + j);
  }
}

// Online-softmax state of the query rows (one per query token and head) of one call, in a
// per-thread scratch that grows to the largest call seen and then stays.
struct RowStates {
  std::vector<float> q;               // (n_rows, dim_padded) zero-padded queries
  std::vector<float> acc;             // (n_rows, dim_padded) unnormalised outputs
  std::vector<float> sum_lanes;       // (n_rows, lanes) running sums, kept lane-wise
  std::vector<float> running_max;     // (n_rows)
  // The splits closed so far, folded in split order (merged_max -inf: none yet).
  std::vector<float> merged_acc;      // (n_rows, dim_padded)
  std::vector<float> merged_sum;      // (n_rows)
  std::vector<float> merged_max;      // (n_rows)
  std::vector<float> k_tile, v_tile;  // (kKeyTile, dim_padded) staged K/V tile as f32

  void Reserve(size_t n_rows, size_t dim_padded, size_t lanes) {
    if (q.size() < n_rows * dim_padded) {
      q.resize(n_rows * dim_padded);
      acc.resize(n_rows * dim_padded);
      merged_acc.resize(n_rows * dim_padded);
    }
    if (sum_lanes.size() < n_rows * lanes) sum_lanes.resize(n_rows * lanes);
    if (running_max.size() < n_rows) {
      running_max.resize(n_rows);
      merged_sum.resize(n_rows);
      merged_max.resize(n_rows);
    }
    if (k_tile.size() < kKeyTile * dim_padded) {
      k_tile.resize(kKeyTile * dim_padded);
      v_tile.resize(kKeyTile * dim_padded);
    }
  }
};

// One query row against one tile of `n_keys` keys, of which the first `n_valid` are visible to
// it. A step is one long dependency chain (dot products, max, exp, weighted sum), so steps run
// in batches, phase by phase: all scores, then all softmax updates, then all weighted V sums.
// Each phase's steps are short and independent (different rows of one tile, or successive
// tiles of one row whose only link is the running max/sum/output), so the out-of-order core
// overlaps them. The float operations of a step are the same whatever its batch.
template <typename TK, typename TV>
struct TileStep {
  const TK* k_rows;  // the tile's first K row; later ones `k_stride` elements apart
  const TV* v_rows;
  size_t row;  // index into RowStates
  // Keys [first_valid, n_valid) of the tile are visible: causal cut at the end, window at the
  // start.
  size_t n_keys, first_valid, n_valid;
  float score_max;          // max of the tile's visible scores
  float correction;         // exp(previous running max - new running max)
  float weights[kKeyTile];  // scaled scores (-inf where masked), then their exp
};

template <class D, typename TK, typename TV>
HWY_INLINE void ScoreStep(D d, const RowStates& rows, size_t dim_padded, float scale,
                          float softcap, size_t k_stride, TileStep<TK, TV>& step) {
  constexpr size_t kLanes = hn::MaxLanes(D());
  constexpr size_t kScoreVecs = kKeyTile / kLanes;
  hn::Vec<D> scores[kScoreVecs];
  TileScores(d, rows.q.data() + step.row * dim_padded, dim_padded / kLanes, step.k_rows, k_stride,
             step.n_keys, scores);
  const auto neg_inf = hn::Set(d, -INFINITY);
  auto max_vec = neg_inf;
  for (size_t i = 0; i < kScoreVecs; ++i) {
    const size_t n_lanes =
        step.n_valid > i * kLanes ? HWY_MIN(kLanes, step.n_valid - i * kLanes) : 0;
    const size_t n_hidden =
        step.first_valid > i * kLanes ? HWY_MIN(kLanes, step.first_valid - i * kLanes) : 0;
    auto scaled = hn::Mul(scores[i], hn::Set(d, scale));
    if (softcap > 0.0f) {
      scaled = hn::Mul(hn::Set(d, softcap), hn::Tanh(d, hn::Div(scaled, hn::Set(d, softcap))));
    }
    const auto visible = hn::AndNot(hn::FirstN(d, n_hidden), hn::FirstN(d, n_lanes));
    const auto score = hn::IfThenElse(visible, scaled, neg_inf);
    max_vec = hn::Max(max_vec, score);
    hn::StoreU(score, d, step.weights + i * kLanes);
  }
  step.score_max = hn::GetLane(hn::MaxOfLanes(d, max_vec));
}

template <class D, typename TK, typename TV>
HWY_INLINE void SoftmaxStep(D d, RowStates& rows, TileStep<TK, TV>& step) {
  constexpr size_t kLanes = hn::MaxLanes(D());
  float& running_max = rows.running_max[step.row];
  const float tile_max = HWY_MAX(running_max, step.score_max);
  // exp(0) is exactly 1, so skipping it when the max holds (most tiles) changes no bit;
  // exp(-inf) = 0 on the first tile scales the zeroed state away.
  const auto correction =
      tile_max == running_max ? hn::Set(d, 1.0f) : hn::Exp(d, hn::Set(d, running_max - tile_max));
  running_max = tile_max;
  step.correction = hn::GetLane(correction);
  const auto max_all = hn::Set(d, tile_max);
  auto tile_sum = hn::Zero(d);
  for (size_t i = 0; i < kKeyTile; i += kLanes) {
    // Masked lanes hold -inf, and exp(-inf) = 0.
    const auto weight = hn::Exp(d, hn::Sub(hn::LoadU(d, step.weights + i), max_all));
    tile_sum = i == 0 ? weight : hn::Add(tile_sum, weight);
    hn::StoreU(weight, d, step.weights + i);
  }
  float* HWY_RESTRICT sum_lanes = rows.sum_lanes.data() + step.row * kLanes;
  hn::StoreU(hn::MulAdd(hn::LoadU(d, sum_lanes), correction, tile_sum), d, sum_lanes);
}

template <typename TK, typename TV>
HWY_INLINE void RunSteps(RowStates& rows, size_t dim_padded, float scale, float softcap,
                         size_t k_stride, size_t v_stride, TileStep<TK, TV>* steps,
                         size_t n_steps) {
  const hn::ScalableTag<float> d;
  for (size_t i = 0; i < n_steps; ++i) {
    ScoreStep(d, rows, dim_padded, scale, softcap, k_stride, steps[i]);
  }
  // In order: successive tiles of one row chain through its running max and sum.
  for (size_t i = 0; i < n_steps; ++i) SoftmaxStep(d, rows, steps[i]);
  for (size_t i = 0; i < n_steps; ++i) {
    const TileStep<TK, TV>& step = steps[i];
    AccumulateValues(d, step.weights, step.n_valid, step.v_rows, v_stride,
                     dim_padded / hn::Lanes(d), hn::Set(d, step.correction),
                     rows.acc.data() + step.row * dim_padded);
  }
}

// Converts `n_keys` head slices (`row_bytes` apart) to f32 rows `dim_padded` apart, zero-padded.
template <typename TKV>
HWY_INLINE void StageTile(const char* HWY_RESTRICT src, size_t row_bytes, size_t n_keys,
                          size_t head_dim, size_t dim_padded, float* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  for (size_t key = 0; key < n_keys; ++key) {
    float* HWY_RESTRICT out = dst + key * dim_padded;
    if constexpr (std::is_same_v<TKV, quant::BlockQ8_0>) {
      DequantizeRow(DType::kQ8_0, src + key * row_bytes, out, head_dim);
      std::memset(out + head_dim, 0, (dim_padded - head_dim) * sizeof(float));
    } else {
      const TKV* HWY_RESTRICT row = reinterpret_cast<const TKV*>(src + key * row_bytes);
      size_t j = 0;
      for (; j + lanes <= head_dim; j += lanes) hn::StoreU(LoadAsF32(d, row + j), d, out + j);
      if (j < head_dim) {
        HWY_ALIGN TKV tail[kMaxF32Lanes];
        CopyPadded(row + j, head_dim - j, tail);
        hn::StoreU(LoadAsF32(d, tail), d, out + j);
      }
    }
  }
}

// Tiles of one row read by the direct path in one batch of steps.
constexpr size_t kTileBatch = 8;

// The tile of keys starting at position `tile_begin`: it never crosses a block, so its rows are
// evenly spaced, and it ends at `max_ctx`. `offset` is its first row's byte offset in the cache.
struct KeyTile {
  size_t offset;
  size_t n_keys;
};

HWY_INLINE KeyTile TileAt(const AttentionArgs& args, size_t row_bytes, size_t tile_begin,
                          size_t max_ctx) {
  const PagedKvView& kv = *args.kv;
  const size_t block = size_t(args.block_table[tile_begin / kv.block_tokens]);
  const size_t slot = tile_begin % kv.block_tokens;
  return {(block * kv.block_tokens + slot) * row_bytes,
          HWY_MIN(HWY_MIN(kKeyTile, kv.block_tokens - slot), max_ctx - tile_begin)};
}

// The start of the tile holding position `pos`: tiles restart at every block and are kKeyTile
// keys long within it (TileAt's walk from position 0 lands on the same boundaries).
HWY_INLINE size_t TileStartOf(size_t pos, size_t block_tokens) {
  const size_t block_begin = pos - pos % block_tokens;
  return block_begin + (pos - block_begin) / kKeyTile * kKeyTile;
}

// The first tile starting at or after `pos`: `pos` itself where a tile starts, else the tile
// after the one holding it (which ends at kKeyTile keys or at its block's end).
HWY_INLINE size_t TileStartFrom(size_t pos, size_t block_tokens) {
  const size_t start = TileStartOf(pos, block_tokens);
  if (start == pos) return pos;
  const size_t block_end = pos - pos % block_tokens + block_tokens;
  return HWY_MIN(start + kKeyTile, block_end);
}

// Splits of a row attending `n_ctx` positions: up to the one holding its last tile.
HWY_INLINE size_t SplitsOf(size_t n_ctx, size_t block_tokens, size_t split_keys) {
  return TileStartOf(n_ctx - 1, block_tokens) / split_keys + 1;
}

// The first position query `query` sees: the window's start, or 0.
HWY_INLINE size_t FirstVisible(const AttentionArgs& args, size_t query) {
  const size_t n_ctx = size_t(args.n_ctx[query]);
  return args.window > 0 && n_ctx > args.window ? n_ctx - args.window : 0;
}

// Query `query`'s row in q, out and the partials.
HWY_INLINE size_t QueryRow(const AttentionSplitArgs& split, size_t query) {
  return split.query_rows != nullptr ? size_t(split.query_rows[query]) : query;
}

// Folds one split's state (max, sum, unnormalised output) into a row's merged state, both
// rescaled to the larger max. The first split is taken as it is, so a row of one split is
// normalised exactly as without splits. Elementwise, so its bits do not depend on the vector
// width; every fold of a row, in this kernel or in AttentionMergeT, runs this code.
template <class D>
HWY_INLINE void FoldState(D d, float split_max, float split_sum,
                          const float* HWY_RESTRICT split_acc, size_t dim_padded, float& merged_max,
                          float& merged_sum, float* HWY_RESTRICT merged_acc) {
  const size_t lanes = hn::Lanes(d);
  if (split_max == -INFINITY) return;  // no visible key in the split
  if (merged_max == -INFINITY) {
    merged_max = split_max;
    merged_sum = split_sum;
    std::memcpy(merged_acc, split_acc, dim_padded * sizeof(float));
    return;
  }
  const float new_max = HWY_MAX(merged_max, split_max);
  // exp(0) is exactly 1: skipped, as in SoftmaxStep.
  const auto old_scale =
      merged_max == new_max ? hn::Set(d, 1.0f) : hn::Exp(d, hn::Set(d, merged_max - new_max));
  const auto split_scale =
      split_max == new_max ? hn::Set(d, 1.0f) : hn::Exp(d, hn::Set(d, split_max - new_max));
  merged_max = new_max;
  merged_sum = hn::GetLane(
      hn::MulAdd(hn::Set(d, merged_sum), old_scale, hn::Mul(hn::Set(d, split_sum), split_scale)));
  for (size_t j = 0; j < dim_padded; j += lanes) {
    hn::StoreU(hn::MulAdd(hn::LoadU(d, merged_acc + j), old_scale,
                          hn::Mul(hn::LoadU(d, split_acc + j), split_scale)),
               d, merged_acc + j);
  }
}

// A row's merged state normalised into `out` (head_dim floats); `acc` (dim_padded) is scaled in
// place. A sink joins the denominator only, rescaled to the larger of the max and the sink so
// that neither exponential can overflow.
template <class D>
HWY_INLINE void FinishRow(D d, float max, float sum, float* HWY_RESTRICT acc, size_t dim_padded,
                          size_t head_dim, const float* sink, float* HWY_RESTRICT out) {
  const size_t lanes = hn::Lanes(d);
  float correction = 1.0f;
  if (sink != nullptr) {
    const float new_max = HWY_MAX(max, *sink);
    correction = std::exp(max - new_max);
    sum = sum * correction + std::exp(*sink - new_max);
  }
  const auto inv_sum = hn::Set(d, correction / sum);
  for (size_t j = 0; j < dim_padded; j += lanes) {
    hn::StoreU(hn::Mul(hn::LoadU(d, acc + j), inv_sum), d, acc + j);
  }
  std::memcpy(out, acc, head_dim * sizeof(float));
}

// For each KV head, walks the sequence's blocks in tiles of keys; each tile is loaded once for
// all query rows (query tokens x the GQA heads sharing the KV head). Each row keeps a running
// max, a running sum and an unnormalised output, rescaled when the max grows, and starts afresh
// at each split, whose state is folded into the row's merged state or written to the partials.
// TKV is the cache element (float, float16_t), or BlockQ8_0 for a Q8_0 cache.
template <typename TKV>
void AttentionRows(const AttentionArgs& args, const AttentionSplitArgs& split_args,
                   size_t head_begin, size_t head_end) {
  const hn::ScalableTag<float> d;
  constexpr size_t kLanes = hn::MaxLanes(hn::ScalableTag<float>());
  static_assert(kKeyTile % kLanes == 0, "a tile's scores are whole vectors");
  constexpr bool kQ8 = std::is_same_v<TKV, quant::BlockQ8_0>;
  const PagedKvView& kv = *args.kv;
  const size_t head_dim = args.head_dim;
  const size_t dim_padded = (head_dim + kLanes - 1) / kLanes * kLanes;
  const size_t group = args.n_heads / args.n_kv_heads;  // query heads per KV head
  const size_t row_bytes = *RowBytes(kv.dtype, kv.row_elems);
  const size_t head_bytes = *RowBytes(kv.dtype, head_dim);
  const size_t split_keys = split_args.split_keys;
  PETREL_DCHECK(split_keys > 0);
  const char* k_cache = static_cast<const char*>(kv.k);
  const char* v_cache = static_cast<const char*>(kv.v);
  size_t max_ctx = 0, min_first = SIZE_MAX;
  for (size_t query = 0; query < args.n_queries; ++query) {
    PETREL_DCHECK(args.n_ctx[query] > 0);
    max_ctx = HWY_MAX(max_ctx, size_t(args.n_ctx[query]));
    min_first = HWY_MIN(min_first, FirstVisible(args, query));
  }
  const bool write_partials = split_args.partials != nullptr;
  const size_t n_splits = SplitsOf(max_ctx, kv.block_tokens, split_keys);
  const size_t split_begin = write_partials ? split_args.split_begin : 0;
  const size_t split_end = write_partials ? HWY_MIN(split_args.split_end, n_splits) : n_splits;
  if (split_begin >= split_end) return;
  // Tiles wholly before every query's window, or before the first split computed, are never
  // read; a row skips the tiles before its own window, so its tiles are the same whichever
  // queries share the call.
  const size_t first_tile = HWY_MAX(TileStartOf(min_first, kv.block_tokens),
                                    TileStartFrom(split_begin * split_keys, kv.block_tokens));
  // Tiles [first_tile, end_tile) are read: the last computed split's, cut at max_ctx.
  const size_t end_tile = HWY_MIN(max_ctx, TileStartFrom(split_end * split_keys, kv.block_tokens));
  thread_local RowStates rows;

  for (size_t kv_head = head_begin / group; kv_head * group < head_end; ++kv_head) {
    const size_t h0 = HWY_MAX(head_begin, kv_head * group);
    const size_t h1 = HWY_MIN(head_end, (kv_head + 1) * group);
    const size_t n_group_heads = h1 - h0;
    const size_t n_rows = args.n_queries * n_group_heads;
    rows.Reserve(n_rows, dim_padded, kLanes);
    auto partial_of = [&](size_t split, size_t r) {
      const size_t query = r / n_group_heads, head = h0 + r % n_group_heads;
      return split_args.partials + split * split_args.partial_split_stride +
             (QueryRow(split_args, query) * args.n_heads + head) * AttentionPartialFloats(head_dim);
    };
    for (size_t r = 0; r < n_rows; ++r) {
      const size_t query = r / n_group_heads, head = h0 + r % n_group_heads;
      float* q = rows.q.data() + r * dim_padded;
      std::memcpy(q, args.q + (QueryRow(split_args, query) * args.n_heads + head) * head_dim,
                  head_dim * sizeof(float));
      std::memset(q + head_dim, 0, (dim_padded - head_dim) * sizeof(float));
      std::memset(rows.acc.data() + r * dim_padded, 0, dim_padded * sizeof(float));
      std::memset(rows.sum_lanes.data() + r * kLanes, 0, kLanes * sizeof(float));
      rows.running_max[r] = -INFINITY;
      rows.merged_max[r] = -INFINITY;
      rows.merged_sum[r] = 0.0f;
      if (write_partials) {
        // Splits a row sees no key of (its window starts later) stay empty.
        for (size_t split = split_begin; split < split_end; ++split) {
          float* partial = partial_of(split, r);
          partial[0] = -INFINITY;
          partial[1] = 0.0f;
        }
      }
    }
    // Ends split `split` of every row: a row that saw keys in it folds its state into its merged
    // state, or writes it out, and starts afresh.
    auto close_split = [&](size_t split) {
      for (size_t r = 0; r < n_rows; ++r) {
        const float max = rows.running_max[r];
        if (max == -INFINITY) continue;
        float* acc = rows.acc.data() + r * dim_padded;
        float* sum_lanes = rows.sum_lanes.data() + r * kLanes;
        const float sum = hn::GetLane(hn::SumOfLanes(d, hn::LoadU(d, sum_lanes)));
        if (write_partials) {
          float* partial = partial_of(split, r);
          partial[0] = max;
          partial[1] = sum;
          std::memcpy(partial + 2, acc, head_dim * sizeof(float));
        } else {
          FoldState(d, max, sum, acc, dim_padded, rows.merged_max[r], rows.merged_sum[r],
                    rows.merged_acc.data() + r * dim_padded);
        }
        std::memset(acc, 0, dim_padded * sizeof(float));
        std::memset(sum_lanes, 0, kLanes * sizeof(float));
        rows.running_max[r] = -INFINITY;
      }
    };
    // Several rows share each tile, staged as f32 once (Q8_0 and heads with a partial last
    // vector always are); one row reads the cache directly, F16 converting in the loads, a
    // batch of tiles at a time. Both give the same values, so the same bits.
    const bool stage = kQ8 || head_dim % kLanes != 0 || n_rows > 1;
    if (stage) {
      thread_local std::vector<TileStep<float, float>> steps;
      if (steps.size() < n_rows) steps.resize(n_rows);
      for (size_t tile_begin = first_tile; tile_begin < end_tile;) {
        const KeyTile tile = TileAt(args, row_bytes, tile_begin, max_ctx);
        const size_t offset = tile.offset + kv_head * head_bytes;
        StageTile<TKV>(k_cache + offset, row_bytes, tile.n_keys, head_dim, dim_padded,
                       rows.k_tile.data());
        StageTile<TKV>(v_cache + offset, row_bytes, tile.n_keys, head_dim, dim_padded,
                       rows.v_tile.data());
        size_t n_steps = 0;
        for (size_t r = 0; r < n_rows; ++r) {
          const size_t n_ctx = size_t(args.n_ctx[r / n_group_heads]);
          if (n_ctx <= tile_begin) continue;  // causal: this tile is past the query
          const size_t first = FirstVisible(args, r / n_group_heads);
          if (tile_begin + tile.n_keys <= first) continue;  // before the query's window
          TileStep<float, float>& step = steps[n_steps++];
          step.k_rows = rows.k_tile.data();
          step.v_rows = rows.v_tile.data();
          step.row = r;
          step.n_keys = tile.n_keys;
          step.first_valid = first > tile_begin ? first - tile_begin : 0;
          step.n_valid = HWY_MIN(tile.n_keys, n_ctx - tile_begin);
        }
        RunSteps(rows, dim_padded, args.scale, args.softcap, dim_padded, dim_padded, steps.data(),
                 n_steps);
        const size_t split = tile_begin / split_keys;
        tile_begin += tile.n_keys;
        if (tile_begin >= end_tile || tile_begin / split_keys != split) close_split(split);
      }
    } else if constexpr (!kQ8) {
      TileStep<TKV, TKV> steps[kTileBatch];
      for (size_t tile_begin = first_tile; tile_begin < end_tile;) {
        const size_t split = tile_begin / split_keys;
        size_t n_steps = 0;
        for (; n_steps < kTileBatch && tile_begin < end_tile && tile_begin / split_keys == split;
             ++n_steps) {
          const KeyTile tile = TileAt(args, row_bytes, tile_begin, max_ctx);
          const size_t offset = tile.offset + kv_head * head_bytes;
          TileStep<TKV, TKV>& step = steps[n_steps];
          step.k_rows = reinterpret_cast<const TKV*>(k_cache + offset);
          step.v_rows = reinterpret_cast<const TKV*>(v_cache + offset);
          step.row = 0;
          step.n_keys = step.n_valid = tile.n_keys;  // max_ctx is the row's n_ctx
          step.first_valid = min_first > tile_begin ? min_first - tile_begin : 0;  // one row
          tile_begin += tile.n_keys;
        }
        RunSteps(rows, dim_padded, args.scale, args.softcap, kv.row_elems, kv.row_elems, steps,
                 n_steps);
        if (tile_begin >= end_tile || tile_begin / split_keys != split) close_split(split);
      }
    }
    if (write_partials) continue;
    for (size_t r = 0; r < n_rows; ++r) {
      const size_t query = r / n_group_heads, head = h0 + r % n_group_heads;
      FinishRow(d, rows.merged_max[r], rows.merged_sum[r], rows.merged_acc.data() + r * dim_padded,
                dim_padded, head_dim, args.sinks != nullptr ? args.sinks + head : nullptr,
                args.out + (QueryRow(split_args, query) * args.n_heads + head) * head_dim);
    }
  }
}

void AttentionT(const AttentionArgs& args, const AttentionSplitArgs& split, size_t head_begin,
                size_t head_end) {
  // The KV cache types this backend reads (the cache's row per type): anything else is refused
  // by Supports before it gets here.
  if (args.kv->dtype == DType::kF32) return AttentionRows<float>(args, split, head_begin, head_end);
  if (args.kv->dtype == DType::kF16) {
    return AttentionRows<hwy::float16_t>(args, split, head_begin, head_end);
  }
  if (args.kv->dtype == DType::kQ8_0) {
    return AttentionRows<quant::BlockQ8_0>(args, split, head_begin, head_end);
  }
  PETREL_CHECK(false && "attention: KV cache must be F32, F16 or Q8_0");
}

// Every split's partial state of each query and head, folded in split order (FoldState, as
// AttentionRows folds them) and normalised into `out`.
void AttentionMergeT(const AttentionArgs& args, const AttentionSplitArgs& split_args,
                     size_t head_begin, size_t head_end) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const size_t head_dim = args.head_dim;
  const size_t dim_padded = (head_dim + lanes - 1) / lanes * lanes;
  thread_local std::vector<float> merged_acc, split_acc;
  if (merged_acc.size() < dim_padded) {
    merged_acc.resize(dim_padded);
    split_acc.resize(dim_padded);
  }
  std::fill(split_acc.begin(), split_acc.end(), 0.0f);  // the padding stays zero
  for (size_t query = 0; query < args.n_queries; ++query) {
    const size_t row = QueryRow(split_args, query);
    const size_t n_splits =
        SplitsOf(size_t(args.n_ctx[query]), args.kv->block_tokens, split_args.split_keys);
    for (size_t head = head_begin; head < head_end; ++head) {
      float merged_max = -INFINITY, merged_sum = 0.0f;
      for (size_t split = 0; split < n_splits; ++split) {
        const float* partial = split_args.partials + split * split_args.partial_split_stride +
                               (row * args.n_heads + head) * AttentionPartialFloats(head_dim);
        if (partial[0] == -INFINITY) continue;
        std::memcpy(split_acc.data(), partial + 2, head_dim * sizeof(float));
        FoldState(d, partial[0], partial[1], split_acc.data(), dim_padded, merged_max, merged_sum,
                  merged_acc.data());
      }
      FinishRow(d, merged_max, merged_sum, merged_acc.data(), dim_padded, head_dim,
                args.sinks != nullptr ? args.sinks + head : nullptr,
                args.out + (row * args.n_heads + head) * head_dim);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

HWY_EXPORT(AttentionT);
HWY_EXPORT(AttentionMergeT);

void Attention(const AttentionArgs& args, size_t head_begin, size_t head_end) {
  PETREL_DCHECK(args.n_kv_heads > 0 && args.n_heads % args.n_kv_heads == 0);
  PETREL_DCHECK(args.n_queries > 0 && args.n_ctx != nullptr);
  HWY_DYNAMIC_DISPATCH(AttentionT)(args, AttentionSplitArgs{}, head_begin, head_end);
}

namespace {

void AttentionSplits(const AttentionArgs& args, const AttentionSplitArgs& split, size_t head_begin,
                     size_t head_end) {
  PETREL_DCHECK(args.n_kv_heads > 0 && args.n_heads % args.n_kv_heads == 0);
  PETREL_DCHECK(args.n_queries > 0 && args.n_ctx != nullptr && split.split_keys > 0);
  HWY_DYNAMIC_DISPATCH(AttentionT)(args, split, head_begin, head_end);
}

void AttentionMerge(const AttentionArgs& args, const AttentionSplitArgs& split, size_t head_begin,
                    size_t head_end) {
  PETREL_DCHECK(split.partials != nullptr && args.n_ctx != nullptr);
  HWY_DYNAMIC_DISPATCH(AttentionMergeT)(args, split, head_begin, head_end);
}

}  // namespace

const AttentionSplitKernels& CpuAttentionSplitKernels() {
  static const AttentionSplitKernels kKernels = {.attention = AttentionSplits,
                                                 .merge = AttentionMerge};
  return kKernels;
}

}  // namespace petrel::cpu
#endif  // HWY_ONCE
