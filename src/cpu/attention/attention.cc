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
#include "hwy/cache_control.h"              // Prefetch
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

// Transposes the L x L block v (L = the vector's lanes): afterwards lane i of v[j] is what was
// lane j of v[i].
template <class D>
HWY_INLINE void TransposeSquare(D d, hn::Vec<D>* v) {
  constexpr size_t kLanes = hn::MaxLanes(D());
  if constexpr (kLanes == 1) {
    return;
#if HWY_TARGET != HWY_SCALAR
  } else if constexpr (kLanes == 4 || kLanes == 8 || (kLanes == 16 && HWY_TARGET <= HWY_AVX3)) {
    // First a 4 x 4 transpose within each 128-bit block of each group of four vectors: block b
    // of r[g][j] is then column 4b + j of rows 4g..4g + 3. Then column c = 4b + j is made of
    // block b of r[0..kGroups)[j].
#if HWY_HAVE_FLOAT64
    const hn::Repartition<double, D> dd;
#else
    const hn::Repartition<uint64_t, D> dd;
#endif
    constexpr size_t kGroups = kLanes / 4;
    hn::Vec<D> r[kGroups][4];
    for (size_t g = 0; g < kGroups; ++g) {
      const hn::Vec<D>* a = v + 4 * g;
      const auto t0 = hn::BitCast(dd, hn::InterleaveLower(d, a[0], a[1]));
      const auto t1 = hn::BitCast(dd, hn::InterleaveUpper(d, a[0], a[1]));
      const auto t2 = hn::BitCast(dd, hn::InterleaveLower(d, a[2], a[3]));
      const auto t3 = hn::BitCast(dd, hn::InterleaveUpper(d, a[2], a[3]));
      r[g][0] = hn::BitCast(d, hn::InterleaveLower(dd, t0, t2));
      r[g][1] = hn::BitCast(d, hn::InterleaveUpper(dd, t0, t2));
      r[g][2] = hn::BitCast(d, hn::InterleaveLower(dd, t1, t3));
      r[g][3] = hn::BitCast(d, hn::InterleaveUpper(dd, t1, t3));
    }
    for (size_t j = 0; j < 4; ++j) {
      if constexpr (kLanes == 4) {
        v[j] = r[0][j];
      } else if constexpr (kLanes == 8) {
        v[j] = hn::ConcatLowerLower(d, r[1][j], r[0][j]);
        v[4 + j] = hn::ConcatUpperUpper(d, r[1][j], r[0][j]);
      } else {
#if HWY_TARGET <= HWY_AVX3
        // Blocks b of r[0..3][j] side by side: a 4 x 4 transpose of 128-bit blocks.
        const __m512 u0 = _mm512_shuffle_f32x4(r[0][j].raw, r[1][j].raw, 0x44);
        const __m512 u1 = _mm512_shuffle_f32x4(r[0][j].raw, r[1][j].raw, 0xEE);
        const __m512 u2 = _mm512_shuffle_f32x4(r[2][j].raw, r[3][j].raw, 0x44);
        const __m512 u3 = _mm512_shuffle_f32x4(r[2][j].raw, r[3][j].raw, 0xEE);
        v[j] = hn::Vec<D>{_mm512_shuffle_f32x4(u0, u2, 0x88)};
        v[4 + j] = hn::Vec<D>{_mm512_shuffle_f32x4(u0, u2, 0xDD)};
        v[8 + j] = hn::Vec<D>{_mm512_shuffle_f32x4(u1, u3, 0x88)};
        v[12 + j] = hn::Vec<D>{_mm512_shuffle_f32x4(u1, u3, 0xDD)};
#endif
      }
    }
#endif
  } else {
    // Other widths: through memory.
    HWY_ALIGN float in[kLanes * kLanes];
    HWY_ALIGN float out[kLanes * kLanes];
    for (size_t i = 0; i < kLanes; ++i) hn::Store(v[i], d, in + i * kLanes);
    for (size_t i = 0; i < kLanes; ++i) {
      for (size_t j = 0; j < kLanes; ++j) out[j * kLanes + i] = in[i * kLanes + j];
    }
    for (size_t j = 0; j < kLanes; ++j) v[j] = hn::Load(d, out + j * kLanes);
  }
}

// A tile's K transposed into kt: element d of key k at kt[d * kKeyTile + k], so that one vector
// holds one element of consecutive keys. row_of(k) points at key k's first element (f32 or f16,
// dim_padded readable) for k < n_keys; the keys past those are zero.
template <class D, class RowOf>
HWY_INLINE void TransposeTile(D d, const RowOf& row_of, size_t n_keys, size_t dim_padded,
                              float* HWY_RESTRICT kt) {
  constexpr size_t kLanes = hn::MaxLanes(D());
  for (size_t db = 0; db < dim_padded; db += kLanes) {
    for (size_t kb = 0; kb < kKeyTile; kb += kLanes) {
      hn::Vec<D> v[kLanes];
      for (size_t i = 0; i < kLanes; ++i) {
        v[i] = kb + i < n_keys ? LoadAsF32(d, row_of(kb + i) + db) : hn::Zero(d);
      }
      TransposeSquare(d, v);
      for (size_t j = 0; j < kLanes; ++j) hn::StoreU(v[j], d, kt + (db + j) * kKeyTile + kb);
    }
  }
}

// Unscaled scores of R query rows for one tile, as kKeyTile / lanes vectors in key order: each
// key's dot product is one chain of fused multiply-adds over the head's elements in order, so
// its bits depend on nothing else: not the target, nor which rows or tiles are computed
// together. kSameTile: every row reads kt[0] (each K vector is then loaded once for the R
// rows); else row r reads kt[r] (successive tiles of one row, whose chains then overlap).
template <size_t R, bool kSameTile, class D>
HWY_INLINE void TransposedScores(D d, const float* const* HWY_RESTRICT q,
                                 const float* const* HWY_RESTRICT kt, size_t head_dim,
                                 hn::Vec<D> (*scores)[kKeyTile / hn::MaxLanes(D())]) {
  constexpr size_t kLanes = hn::MaxLanes(D());
  constexpr size_t kScoreVecs = kKeyTile / kLanes;
  for (size_t r = 0; r < R; ++r) {
    for (size_t i = 0; i < kScoreVecs; ++i) scores[r][i] = hn::Zero(d);
  }
  for (size_t j = 0; j < head_dim; ++j) {
    if constexpr (kSameTile) {
      hn::Vec<D> k[kScoreVecs];
      for (size_t i = 0; i < kScoreVecs; ++i) k[i] = hn::LoadU(d, kt[0] + j * kKeyTile + i * kLanes);
      for (size_t r = 0; r < R; ++r) {
        const auto q_elem = hn::Set(d, q[r][j]);
        for (size_t i = 0; i < kScoreVecs; ++i) scores[r][i] = hn::MulAdd(q_elem, k[i], scores[r][i]);
      }
    } else {
      for (size_t r = 0; r < R; ++r) {
        const auto q_elem = hn::Set(d, q[r][j]);
        for (size_t i = 0; i < kScoreVecs; ++i) {
          const auto k = hn::LoadU(d, kt[r] + j * kKeyTile + i * kLanes);
          scores[r][i] = hn::MulAdd(q_elem, k, scores[r][i]);
        }
      }
    }
  }
}

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

// AccumulateValues for R rows with the same visible keys against one tile: each element's
// operations are AccumulateValues' (so its bits are), with each V vector loaded once for the R
// rows, as many vectors of the head at a time as leave the even and odd chains in registers.
template <size_t R, class D, typename TV>
HWY_INLINE void AccumulateValuesRows(D d, const float* const* HWY_RESTRICT weights,
                                     size_t n_valid, const TV* HWY_RESTRICT v_rows,
                                     size_t v_stride, size_t dim_vecs,
                                     const float* HWY_RESTRICT corrections,
                                     float* const* HWY_RESTRICT acc) {
  constexpr size_t kLanes = hn::MaxLanes(D());
  constexpr size_t kChainRegs = HWY_MAX_BYTES >= 64 ? 16 : 8;
  constexpr size_t kVecs = 4 * R <= kChainRegs ? 2 : 1;
  size_t j = 0;
  for (; j + kVecs * kLanes <= dim_vecs * kLanes; j += kVecs * kLanes) {
    hn::Vec<D> e[R][kVecs], o[R][kVecs];
    for (size_t r = 0; r < R; ++r) {
      for (size_t u = 0; u < kVecs; ++u) e[r][u] = o[r][u] = hn::Zero(d);
    }
    const TV* HWY_RESTRICT v = v_rows + j;
    size_t key = 0;
    for (; key + 2 <= n_valid; key += 2, v += 2 * v_stride) {
      hn::Vec<D> ve[kVecs], vo[kVecs];
      for (size_t u = 0; u < kVecs; ++u) {
        ve[u] = LoadAsF32(d, v + u * kLanes);
        vo[u] = LoadAsF32(d, v + v_stride + u * kLanes);
      }
      for (size_t r = 0; r < R; ++r) {
        const auto w_even = hn::Set(d, weights[r][key]);
        const auto w_odd = hn::Set(d, weights[r][key + 1]);
        for (size_t u = 0; u < kVecs; ++u) {
          e[r][u] = hn::MulAdd(w_even, ve[u], e[r][u]);
          o[r][u] = hn::MulAdd(w_odd, vo[u], o[r][u]);
        }
      }
    }
    if (key < n_valid) {
      hn::Vec<D> ve[kVecs];
      for (size_t u = 0; u < kVecs; ++u) ve[u] = LoadAsF32(d, v + u * kLanes);
      for (size_t r = 0; r < R; ++r) {
        const auto w_even = hn::Set(d, weights[r][key]);
        for (size_t u = 0; u < kVecs; ++u) e[r][u] = hn::MulAdd(w_even, ve[u], e[r][u]);
      }
    }
    for (size_t r = 0; r < R; ++r) {
      const auto correction = hn::Set(d, corrections[r]);
      for (size_t u = 0; u < kVecs; ++u) {
        float* HWY_RESTRICT a = acc[r] + j + u * kLanes;
        hn::StoreU(hn::MulAdd(hn::LoadU(d, a), correction, hn::Add(e[r][u], o[r][u])), d, a);
      }
    }
  }
  for (size_t r = 0; r < R; ++r) {
    if (j < dim_vecs * kLanes) {
      AccumulateValues(d, weights[r], n_valid, v_rows + j, v_stride, dim_vecs - j / kLanes,
                       hn::Set(d, corrections[r]), acc[r] + j);
    }
  }
}

// Rows computed together against one tile (TransposedScores, AccumulateValuesRows): as many as
// keep their accumulators in registers (32 vector registers with AVX-512, 16 otherwise), and a
// multiple of a usual GQA group (8 query heads per KV head).
#if HWY_TARGET == HWY_SCALAR
constexpr size_t kTileRowBlock = 1;
#elif HWY_MAX_BYTES >= 64
constexpr size_t kTileRowBlock = 8;
#elif HWY_MAX_BYTES >= 32
constexpr size_t kTileRowBlock = 4;
#else
constexpr size_t kTileRowBlock = 2;
#endif
// Steps of different tiles scored together (one row's successive tiles).
constexpr size_t kTileStepBlock = kTileRowBlock < 4 ? kTileRowBlock : 4;

// TransposedScores<kTileRowBlock, true> for a block of consecutive rows, their queries
// interleaved (RowStates::q_blocks): one base address for all the rows' elements. The same
// operations, so the same bits.
template <class D>
HWY_INLINE void BlockScores(D d, const float* HWY_RESTRICT q_block, const float* HWY_RESTRICT kt,
                            size_t head_dim,
                            hn::Vec<D> (*scores)[kKeyTile / hn::MaxLanes(D())]) {
  constexpr size_t kLanes = hn::MaxLanes(D());
  constexpr size_t kScoreVecs = kKeyTile / kLanes;
  constexpr size_t R = kTileRowBlock;
  for (size_t r = 0; r < R; ++r) {
    for (size_t i = 0; i < kScoreVecs; ++i) scores[r][i] = hn::Zero(d);
  }
  for (size_t j = 0; j < head_dim; ++j) {
    hn::Vec<D> k[kScoreVecs];
    for (size_t i = 0; i < kScoreVecs; ++i) k[i] = hn::LoadU(d, kt + j * kKeyTile + i * kLanes);
    const float* HWY_RESTRICT q_elems = q_block + j * R;
    for (size_t r = 0; r < R; ++r) {
      const auto q_elem = hn::Set(d, q_elems[r]);
      for (size_t i = 0; i < kScoreVecs; ++i) scores[r][i] = hn::MulAdd(q_elem, k[i], scores[r][i]);
    }
  }
}

// Online-softmax state of the query rows (one per query token and head) of one call, in a
// per-thread scratch that grows to the largest call seen and then stays.
struct RowStates {
  std::vector<float> q;               // (n_rows, dim_padded) zero-padded queries
  // The queries again by blocks of kTileRowBlock rows, interleaved: element d of row r at
  // q_blocks[(r / kTileRowBlock * dim_padded + d) * kTileRowBlock + r % kTileRowBlock], so that a
  // block's elements d are side by side (BlockScores).
  std::vector<float> q_blocks;
  std::vector<float> acc;             // (n_rows, dim_padded) unnormalised outputs
  std::vector<float> sum_lanes;       // (n_rows, lanes) running sums, kept lane-wise
  std::vector<float> running_max;     // (n_rows)
  // The splits closed so far, folded in split order (merged_max -inf: none yet).
  std::vector<float> merged_acc;      // (n_rows, dim_padded)
  std::vector<float> merged_sum;      // (n_rows)
  std::vector<float> merged_max;      // (n_rows)
  // A batch's tiles staged as f32: K transposed (per tile dim_padded x kKeyTile, TransposeTile)
  // by way of k_stage (kKeyTile x dim_padded), V as rows (per tile kKeyTile x dim_padded).
  std::vector<float> k_stage, k_tiles, v_tiles;

  void Reserve(size_t n_rows, size_t dim_padded, size_t lanes, size_t n_tiles) {
    const size_t block_rows = (n_rows + kTileRowBlock - 1) / kTileRowBlock * kTileRowBlock;
    if (q_blocks.size() < block_rows * dim_padded) q_blocks.resize(block_rows * dim_padded);
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
    if (k_tiles.size() < n_tiles * kKeyTile * dim_padded) {
      k_stage.resize(kKeyTile * dim_padded);
      k_tiles.resize(n_tiles * kKeyTile * dim_padded);
      v_tiles.resize(n_tiles * kKeyTile * dim_padded);
    }
  }
};

// The calling thread's row states.
HWY_INLINE RowStates& ThreadRowStates() {
  thread_local RowStates rows;
  return rows;
}

// One query row against one tile of `n_keys` keys, of which the first `n_valid` are visible to
// it. A step is one long dependency chain (dot products, max, exp, weighted sum), so steps run
// in batches, phase by phase: all scores, then all softmax updates, then all weighted V sums.
// Each phase's steps are short and independent (different rows of one tile, or successive
// tiles of one row whose only link is the running max/sum/output), so the out-of-order core
// overlaps them. The float operations of a step are the same whatever its batch.
template <typename TV>
struct TileStep {
  const float* kt;   // the tile's K, transposed (TransposeTile)
  const TV* v_rows;  // the tile's V rows (in the cache, or staged as f32)
  size_t row;           // index into RowStates
  // Keys [first_valid, n_valid) of the tile are visible: causal cut at the end, window at the
  // start.
  size_t n_keys, first_valid, n_valid;
  float score_max;          // max of the tile's visible scores
  float correction;         // exp(previous running max - new running max)
  float weights[kKeyTile];  // scaled scores (-inf where masked), then their exp
};

// A step's scores (TileScores') scaled, soft-capped and masked into its weights, and their max.
template <class D, typename TV>
HWY_INLINE void FinishScores(D d, float scale, float softcap,
                             const hn::Vec<D>* HWY_RESTRICT scores, TileStep<TV>& step) {
  constexpr size_t kLanes = hn::MaxLanes(D());
  constexpr size_t kScoreVecs = kKeyTile / kLanes;
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

template <class D, typename TV>
HWY_INLINE void SoftmaxStep(D d, RowStates& rows, TileStep<TV>& step) {
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


// The scores of steps [0, R): kSameTile, all of one tile; else each of its own.
template <size_t R, bool kSameTile, typename TV>
HWY_INLINE void ScoreRows(const RowStates& rows, size_t dim_padded, size_t head_dim, float scale,
                          float softcap, TileStep<TV>* steps) {
  const hn::ScalableTag<float> d;
  constexpr size_t kLanes = hn::MaxLanes(hn::ScalableTag<float>());
  // Accumulators in registers: R x kKeyTile / kLanes of them.
  const float* q[R];
  const float* kt[R];
  for (size_t r = 0; r < R; ++r) {
    q[r] = rows.q.data() + steps[r].row * dim_padded;
    kt[r] = steps[r].kt;
  }
  hn::Vec<decltype(d)> scores[R][kKeyTile / kLanes];
  const size_t first_row = steps[0].row;
  if (R == kTileRowBlock && kSameTile && first_row % R == 0 &&
      steps[R - 1].row == first_row + R - 1) {
    BlockScores(d, rows.q_blocks.data() + first_row * dim_padded, kt[0], head_dim, scores);
  } else {
    TransposedScores<R, kSameTile>(d, q, kt, head_dim, scores);
  }
  for (size_t r = 0; r < R; ++r) FinishScores(d, scale, softcap, scores[r], steps[r]);
}

// The weighted V sums of steps [0, R), which read one tile and see the same keys.
template <size_t R, typename TV>
HWY_INLINE void AccumulateRows(RowStates& rows, size_t dim_padded, size_t v_stride,
                               const TileStep<TV>* steps) {
  const hn::ScalableTag<float> d;
  const float* weights[R];
  float corrections[R];
  float* acc[R];
  for (size_t r = 0; r < R; ++r) {
    weights[r] = steps[r].weights;
    corrections[r] = steps[r].correction;
    acc[r] = rows.acc.data() + steps[r].row * dim_padded;
  }
  AccumulateValuesRows<R>(d, weights, steps[0].n_valid, steps[0].v_rows, v_stride,
                          dim_padded / hn::Lanes(d), corrections, acc);
}

// A batch of steps, phase by phase. A step is one long dependency chain (dot products, max, exp,
// weighted sum), so each phase takes several independent steps at once (rows of one tile, or
// successive tiles of one row, whose only link is the running max, sum and output, taken in
// order by the softmax phase), and the out-of-order core overlaps them. Every row's operations
// are the same whatever its batch, so its bits are.
template <typename TV>
HWY_INLINE void RunTileSteps(RowStates& rows, size_t dim_padded, size_t head_dim, float scale,
                             float softcap, size_t v_stride, TileStep<TV>* steps, size_t n_steps) {
  const hn::ScalableTag<float> d;
  // Scores: rows of one tile kTileRowBlock at a time; what is left (fewer rows, or one row's
  // successive tiles) in blocks of steps that each read their own tile.
  size_t i = 0;
  while (i < n_steps) {
    size_t same = 1;
    while (same < kTileRowBlock && i + same < n_steps && steps[i + same].kt == steps[i].kt) ++same;
    if (same == kTileRowBlock) {
      ScoreRows<kTileRowBlock, true>(rows, dim_padded, head_dim, scale, softcap, steps + i);
      i += same;
    } else if (n_steps - i >= kTileStepBlock) {
      ScoreRows<kTileStepBlock, false>(rows, dim_padded, head_dim, scale, softcap, steps + i);
      i += kTileStepBlock;
    } else {
      ScoreRows<1, false>(rows, dim_padded, head_dim, scale, softcap, steps + i);
      i += 1;
    }
  }
  for (i = 0; i < n_steps; ++i) SoftmaxStep(d, rows, steps[i]);
  // Weighted sums: blocks of rows that read one tile and see the same keys (a prompt's rows
  // differ at the causal edge).
  for (i = 0; i < n_steps;) {
    size_t n = 1;
    while (n < kTileRowBlock && i + n < n_steps && steps[i + n].v_rows == steps[i].v_rows &&
           steps[i + n].n_valid == steps[i].n_valid) {
      ++n;
    }
    if (n == kTileRowBlock) {
      AccumulateRows<kTileRowBlock>(rows, dim_padded, v_stride, steps + i);
    } else if (n >= kTileStepBlock) {
      AccumulateRows<kTileStepBlock>(rows, dim_padded, v_stride, steps + i);
      n = kTileStepBlock;
    } else {
      for (size_t r = 0; r < n; ++r) AccumulateRows<1>(rows, dim_padded, v_stride, steps + i + r);
    }
    i += n;
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

// Asks for the K and V head slices of the `n_keys` rows at `offset` (`row_bytes` apart) ahead of
// their use. A tile's rows are a row stride apart (every KV head's slice in between), a pattern
// the hardware prefetchers pick up too late for a tile's short staging loop: without this,
// staging waited on each row's first load.
HWY_INLINE void PrefetchTile(const char* k_cache, const char* v_cache, size_t offset,
                             size_t n_keys, size_t row_bytes, size_t head_bytes) {
  for (size_t key = 0; key < n_keys; ++key) {
    const size_t row = offset + key * row_bytes;
    for (size_t line = 0; line < head_bytes; line += 64) {
      hwy::Prefetch(k_cache + row + line);
      hwy::Prefetch(v_cache + row + line);
    }
  }
}

// Tiles per batch of steps where the call has fewer rows than a block (decoding with one query
// head per item): that row's successive tiles then fill the phases instead.
constexpr size_t kTileBatch = 4;

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

// The tiles [first_tile, end_tile) of KV head kv_head against the call's rows, in batches of up
// to batch_tiles tiles that stay in one split; close_split(split) after each split's last tile.
// kInPlace: K transposed from the cache and V read there; else both staged as f32 first.
template <typename TKV, bool kInPlace, class CloseSplit>
HWY_INLINE void RunTiles(const AttentionArgs& args, size_t split_keys, size_t kv_head,
                         size_t first_tile, size_t end_tile, size_t max_ctx, size_t n_rows,
                         size_t n_group_heads, size_t batch_tiles,
                         const CloseSplit& close_split) {
  const hn::ScalableTag<float> d;
  constexpr size_t kLanes = hn::MaxLanes(hn::ScalableTag<float>());
  using TV = std::conditional_t<kInPlace, TKV, float>;
  const PagedKvView& kv = *args.kv;
  const size_t head_dim = args.head_dim;
  const size_t dim_padded = (head_dim + kLanes - 1) / kLanes * kLanes;
  const size_t row_bytes = *RowBytes(kv.dtype, kv.row_elems);
  const size_t head_bytes = *RowBytes(kv.dtype, head_dim);
  const char* k_cache = static_cast<const char*>(kv.k);
  const char* v_cache = static_cast<const char*>(kv.v);
  RowStates& rows = ThreadRowStates();
  thread_local std::vector<TileStep<TV>> steps;
  if (steps.size() < n_rows * batch_tiles) steps.resize(n_rows * batch_tiles);
  // The tile two ahead is fetched while this one is computed.
  size_t ahead = first_tile;
  auto prefetch_next = [&] {
    if (ahead >= end_tile) return;
    const KeyTile next = TileAt(args, row_bytes, ahead, max_ctx);
    PrefetchTile(k_cache, v_cache, next.offset + kv_head * head_bytes, next.n_keys, row_bytes,
                 head_bytes);
    ahead += next.n_keys;
  };
  prefetch_next();
  prefetch_next();
  for (size_t tile_begin = first_tile; tile_begin < end_tile;) {
    const size_t split = tile_begin / split_keys;
    size_t n_steps = 0;
    for (size_t t = 0;
         t < batch_tiles && tile_begin < end_tile && tile_begin / split_keys == split; ++t) {
      prefetch_next();
      const KeyTile tile = TileAt(args, row_bytes, tile_begin, max_ctx);
      const size_t offset = tile.offset + kv_head * head_bytes;
      float* kt = rows.k_tiles.data() + t * kKeyTile * dim_padded;
      const TV* v_rows;
      if constexpr (kInPlace) {
        const auto* k_head = reinterpret_cast<const TV*>(k_cache + offset);
        TransposeTile(
            d, [&](size_t key) { return k_head + key * kv.row_elems; }, tile.n_keys, dim_padded,
            kt);
        v_rows = reinterpret_cast<const TV*>(v_cache + offset);
      } else {
        StageTile<TKV>(k_cache + offset, row_bytes, tile.n_keys, head_dim, dim_padded,
                       rows.k_stage.data());
        const float* staged = rows.k_stage.data();
        TransposeTile(
            d, [&](size_t key) { return staged + key * dim_padded; }, tile.n_keys, dim_padded,
            kt);
        float* vt = rows.v_tiles.data() + t * kKeyTile * dim_padded;
        StageTile<TKV>(v_cache + offset, row_bytes, tile.n_keys, head_dim, dim_padded, vt);
        v_rows = vt;
      }
      for (size_t r = 0; r < n_rows; ++r) {
        const size_t n_ctx = size_t(args.n_ctx[r / n_group_heads]);
        if (n_ctx <= tile_begin) continue;  // causal: this tile is past the query
        const size_t first = FirstVisible(args, r / n_group_heads);
        if (tile_begin + tile.n_keys <= first) continue;  // before the query's window
        TileStep<TV>& step = steps[n_steps++];
        step.kt = kt;
        step.v_rows = v_rows;
        step.row = r;
        step.n_keys = tile.n_keys;
        step.first_valid = first > tile_begin ? first - tile_begin : 0;
        step.n_valid = HWY_MIN(tile.n_keys, n_ctx - tile_begin);
      }
      tile_begin += tile.n_keys;
    }
    const size_t v_stride = kInPlace ? kv.row_elems : dim_padded;
    RunTileSteps(rows, dim_padded, head_dim, args.scale, args.softcap, v_stride, steps.data(),
                 n_steps);
    if (tile_begin >= end_tile || tile_begin / split_keys != split) close_split(split);
  }
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
  const PagedKvView& kv = *args.kv;
  const size_t head_dim = args.head_dim;
  const size_t dim_padded = (head_dim + kLanes - 1) / kLanes * kLanes;
  const size_t group = args.n_heads / args.n_kv_heads;  // query heads per KV head
  const size_t split_keys = split_args.split_keys;
  PETREL_DCHECK(split_keys > 0);
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
  RowStates& rows = ThreadRowStates();

  for (size_t kv_head = head_begin / group; kv_head * group < head_end; ++kv_head) {
    const size_t h0 = HWY_MAX(head_begin, kv_head * group);
    const size_t h1 = HWY_MIN(head_end, (kv_head + 1) * group);
    const size_t n_group_heads = h1 - h0;
    const size_t n_rows = args.n_queries * n_group_heads;
    const size_t batch_tiles = n_rows < kTileRowBlock ? kTileBatch : 1;
    rows.Reserve(n_rows, dim_padded, kLanes, batch_tiles);
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
      float* q_block = rows.q_blocks.data() + r / kTileRowBlock * dim_padded * kTileRowBlock;
      for (size_t j = 0; j < head_dim; ++j) q_block[j * kTileRowBlock + r % kTileRowBlock] = q[j];
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
    // K and V read in place (f16 or f32 heads of whole vectors; K transposed per tile), or
    // staged as f32 first (a Q8_0 cache, or a head with a partial last vector). Both give the
    // same values, so the same bits.
    if constexpr (!std::is_same_v<TKV, quant::BlockQ8_0>) {
      if (head_dim % kLanes == 0) {
        RunTiles<TKV, true>(args, split_keys, kv_head, first_tile, end_tile, max_ctx, n_rows,
                           n_group_heads, batch_tiles, close_split);
      } else {
        RunTiles<TKV, false>(args, split_keys, kv_head, first_tile, end_tile, max_ctx, n_rows,
                             n_group_heads, batch_tiles, close_split);
      }
    } else {
      RunTiles<TKV, false>(args, split_keys, kv_head, first_tile, end_tile, max_ctx, n_rows,
                           n_group_heads, batch_tiles, close_split);
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
