// Per-target mat_mul body shared by the per-weight-type TUs (matmul_f32.cc, matmul_f16.cc, ...).

#if defined(PETREL_CPU_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PETREL_CPU_MATMUL_INL_H_
#undef PETREL_CPU_MATMUL_INL_H_
#else
#define PETREL_CPU_MATMUL_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "cpu/threading/host_work_split.h"  // kShortBatchTokens
#include "cpu/simd/simd-inl.h"         // LoadAsF32, CopyPadded
#include "hwy/cache_control.h"  // Prefetch
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Prefetches every cache line of [p, p + bytes).
HWY_INLINE void PrefetchBytes(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < bytes; i += 64) hwy::Prefetch(c + i);
}

// sums[j] = SumOfLanes(acc[j]) of 8-lane vectors, four rows at a time, with the order of
// additions SumOfLanes uses there (lane i + lane i+4, then (0+2) + (1+3) of those), but
// transposed so that one add serves four rows: a tile's epilogue, twelve separate reductions,
// took several percent of an F16 prompt.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
template <size_t kRows, class V8>
HWY_INLINE void SumRowsOf8Lanes(const V8* HWY_RESTRICT v8, float* HWY_RESTRICT sums) {
  const hn::Full128<float> d4;
  for (size_t g = 0; g < kRows; g += 4) {
    auto half = [&](size_t j) {
      const V8 v = v8[std::min(g + j, kRows - 1)];
      return hn::Add(hn::LowerHalf(d4, v), hn::UpperHalf(d4, v));
    };
    const auto a = half(0), b = half(1), c = half(2), e = half(3);
    const auto p = hn::Add(hn::InterleaveLower(d4, a, b), hn::InterleaveUpper(d4, a, b));
    const auto q = hn::Add(hn::InterleaveLower(d4, c, e), hn::InterleaveUpper(d4, c, e));
    hn::Store(hn::Add(hn::ConcatLowerLower(d4, q, p), hn::ConcatUpperUpper(d4, q, p)), d4,
              sums + g);
  }
}
#endif

// sums[j] = SumOfLanes(acc[j]) for kRows accumulators, bit for bit.
template <size_t kRows, class D, class V>
HWY_INLINE void SumRows(D d, const V* HWY_RESTRICT acc, float* HWY_RESTRICT sums) {
#if HWY_TARGET == HWY_AVX2
  if constexpr (kRows >= 2) {
    static_assert(hn::MaxLanes(D()) == 8, "the tree is SumOfLanes' for 8 lanes");
    return SumRowsOf8Lanes<kRows>(acc, sums);
  }
#elif HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // SumOfLanes is _mm512_reduce_add_ps here, which adds the upper 256 bits to the lower and
  // then reduces those 8 lanes with the tree above. A 4 x 6 tile's 24 separate reductions were
  // a few percent of an F16 prompt (perf, gemm_bench).
  if constexpr (kRows >= 2) {
    static_assert(hn::MaxLanes(D()) == 16, "the first step is SumOfLanes' for 16 lanes");
    const hn::Full256<float> d8;
    hn::Vec<decltype(d8)> halves[kRows];
    for (size_t j = 0; j < kRows; ++j) {
      halves[j] = hn::Add(hn::UpperHalf(d8, acc[j]), hn::LowerHalf(d8, acc[j]));
    }
    return SumRowsOf8Lanes<kRows>(halves, sums);
  }
#endif
  for (size_t j = 0; j < kRows; ++j) sums[j] = hn::GetLane(hn::SumOfLanes(d, acc[j]));
}

// Register tile: kRows weight rows x kTokens tokens, one accumulator per (row, token): full
// vector k of the row, then the zero-padded tail, go into it in order, and the result is its
// SumOfLanes. Each weight vector is loaded (and widened) once per tile and used for kTokens
// tokens; each activation vector once and used for kRows rows. The summation order of every
// (row, token) pair is the same for any tile shape, so results do not depend on batching or
// row splits. (One accumulator per pair rather than two leaves registers for a 3 x 4 tile on
// 16-register targets, which is what keeps the FMA units, not the loads, the limit.)
// A row may be split into segments of k: the first starts from zero, each but the last stores
// its accumulators to `saved` (kRows * kTokens vectors) and the next resumes from them, so the
// order of the sums, and the bits of the result, stay those of one pass.
// kResume and kFinish are template arguments (MatMulTile below picks the instance): with them
// run-time flags, the compiler kept the accumulators in a stack array and copied them in and out
// around the loop on every call of a segmented prompt tile (gemm_bench 2048 x 2048 x 128: 2.8 %
// of the kernel's samples on those copies, 1.5 % with the flags as template arguments).
template <size_t kRows, size_t kTokens, bool kResume, bool kFinish, typename TW>
HWY_INLINE void MatMulTileBody(const TW* const* HWY_RESTRICT w_rows,
                               const TW* HWY_RESTRICT w_tail, size_t row_stride_elems,
                               size_t n_full, size_t tail, const float* HWY_RESTRICT x,
                               size_t x_stride, const float* HWY_RESTRICT bias,
                               float* HWY_RESTRICT out, size_t out_stride, size_t row,
                               size_t row_step, float* HWY_RESTRICT saved,
                               size_t stream_ahead) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t lanes = hn::Lanes(d);
  V acc[kRows][kTokens];
  for (size_t j = 0; j < kRows; ++j) {
    for (size_t t = 0; t < kTokens; ++t) {
      if constexpr (kResume) {
        acc[j][t] = hn::Load(d, saved + (j * kTokens + t) * lanes);
      } else {
        acc[j][t] = hn::Zero(d);
      }
    }
  }
  // Matrix-vector products stream rows that are short (a few KB) and read kRows at a time, too
  // briefly for the hardware prefetcher to ramp up on each; prefetch the same place kRows rows
  // ahead, so the next row block is in flight while this one is computed.
  // At least ~12 KB ahead: with short rows one block ahead is too close to hide the latency.
  const size_t block_elems = kRows * row_stride_elems;
  const size_t ahead = block_elems * (1 + (12288 / sizeof(TW)) / (block_elems + 1));
  // Rows that are long streams (spaced row blocks): each stream is fetched stream_ahead
  // elements ahead, one cache line per line read. Without it a short batch's tile, whose FMAs
  // take longer than a line's read, waited for each line and then computed: memory and
  // arithmetic added up instead of overlapping (4 tokens cost 2.3x one token, one thread,
  // gemm_bench). A row's stream runs on into the next row of its block, which follows it.
  const size_t line_vecs = std::max<size_t>(1, 64 / (lanes * sizeof(TW)));
  for (size_t k = 0; k < n_full; ++k) {
    if (kTokens == 1 && row_stride_elems != 0 && k % 2 == 0) {
      for (size_t j = 0; j < kRows; ++j) {
        hwy::Prefetch(w_rows[j] + ahead + k * lanes);
        hwy::Prefetch(w_rows[j] + ahead + (k + 1) * lanes);
      }
    }
    if (stream_ahead != 0 && k % line_vecs == 0) {
      for (size_t j = 0; j < kRows; ++j) hwy::Prefetch(w_rows[j] + stream_ahead + k * lanes);
    }
    V wv[kRows];
    for (size_t j = 0; j < kRows; ++j) wv[j] = LoadAsF32(d, w_rows[j] + k * lanes);
    for (size_t t = 0; t < kTokens; ++t) {
      const V xv = hn::LoadU(d, x + t * x_stride + k * lanes);
      for (size_t j = 0; j < kRows; ++j) acc[j][t] = hn::MulAdd(wv[j], xv, acc[j][t]);
    }
  }
  if constexpr (!kFinish) {
    for (size_t j = 0; j < kRows; ++j) {
      for (size_t t = 0; t < kTokens; ++t) hn::Store(acc[j][t], d, saved + (j * kTokens + t) * lanes);
    }
    return;
  }
  if (tail != 0) {
    for (size_t t = 0; t < kTokens; ++t) {
      HWY_ALIGN float x_tail[kMaxF32Lanes];
      CopyPadded(x + t * x_stride + n_full * lanes, tail, x_tail);
      const V xv = hn::Load(d, x_tail);
      for (size_t j = 0; j < kRows; ++j) {
        acc[j][t] = hn::MulAdd(LoadAsF32(d, w_tail + j * kMaxF32Lanes), xv, acc[j][t]);
      }
    }
  }
  for (size_t t = 0; t < kTokens; ++t) {
    V row_acc[kRows];
    for (size_t j = 0; j < kRows; ++j) row_acc[j] = acc[j][t];
    HWY_ALIGN float sums[(kRows + 3) / 4 * 4];
    SumRows<kRows>(d, row_acc, sums);
    for (size_t j = 0; j < kRows; ++j) {
      const size_t r = row + j * row_step;
      out[t * out_stride + r] = sums[j] + (bias ? bias[r] : 0.0f);
    }
  }
}

template <size_t kRows, size_t kTokens, typename TW>
HWY_INLINE void MatMulTile(const TW* const* HWY_RESTRICT w_rows, const TW* HWY_RESTRICT w_tail,
                           size_t row_stride_elems, size_t n_full, size_t tail,
                           const float* HWY_RESTRICT x, size_t x_stride,
                           const float* HWY_RESTRICT bias, float* HWY_RESTRICT out,
                           size_t out_stride, size_t row, size_t row_step,
                           float* HWY_RESTRICT saved = nullptr, bool resume = false,
                           bool finish = true, size_t stream_ahead = 0) {
#define PETREL_TILE_BODY(RESUME, FINISH)                                                         \
  MatMulTileBody<kRows, kTokens, RESUME, FINISH, TW>(w_rows, w_tail, row_stride_elems, n_full,   \
                                                     tail, x, x_stride, bias, out, out_stride,   \
                                                     row, row_step, saved, stream_ahead)
  if (resume) {
    if (finish) {
      PETREL_TILE_BODY(true, true);
    } else {
      PETREL_TILE_BODY(true, false);
    }
  } else if (finish) {
    PETREL_TILE_BODY(false, true);
  } else {
    PETREL_TILE_BODY(false, false);
  }
#undef PETREL_TILE_BODY
}

// Tile shape: the accumulators (rows x tokens) plus the row vectors and one activation vector
// must fit the target's vector registers (16 on AVX2/SSE4, 32 on AVX-512).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr size_t kTileRows = 4;
constexpr size_t kTileTokens = 6;
#else
constexpr size_t kTileRows = 3;
constexpr size_t kTileTokens = 4;
#endif
// The last n (< kTileTokens) tokens of a prompt chunk in one narrower tile, so that each weight
// vector is still converted once for all of them.
template <size_t kRows, typename TW>
HWY_INLINE void MatMulLeftoverTokens(const TW* const* HWY_RESTRICT w_rows,
                                     const TW* HWY_RESTRICT w_tail, size_t n_full, size_t tail,
                                     const float* HWY_RESTRICT x, size_t x_stride, size_t n,
                                     const float* HWY_RESTRICT bias, float* HWY_RESTRICT out,
                                     size_t out_stride, size_t row, size_t row_step,
                                     float* HWY_RESTRICT saved, bool resume, bool finish,
                                     size_t stream_ahead = 0) {
  static_assert(kTileTokens <= 8, "one case per leftover count below");
  switch (n) {
#define PETREL_LEFTOVER_CASE(N)                                                                 \
  case N:                                                                                       \
    if constexpr (N < kTileTokens) {                                                            \
      MatMulTile<kRows, N, TW>(w_rows, w_tail, 0, n_full, tail, x, x_stride, bias, out,         \
                               out_stride, row, row_step, saved, resume, finish, stream_ahead); \
    }                                                                                           \
    break;
    PETREL_LEFTOVER_CASE(1)
    PETREL_LEFTOVER_CASE(2)
    PETREL_LEFTOVER_CASE(3)
    PETREL_LEFTOVER_CASE(4)
    PETREL_LEFTOVER_CASE(5)
    PETREL_LEFTOVER_CASE(6)
    PETREL_LEFTOVER_CASE(7)
#undef PETREL_LEFTOVER_CASE
    default:
      break;
  }
}

// How far ahead a short batch's tile fetches each of its row streams. gemm_bench's short shapes
// (F16, 32000 x 2048, one thread, CPU time on a loaded host, two alternations), 4 tokens against
// 1: no fetching 1.87 / 2.24x, 1 KB ahead 1.52 / 1.90x, 4 KB ahead 1.51 / 1.37x.
constexpr size_t kStreamAheadBytes = 4096;
// The same for a single token, whose tile reads each line once and computes little on it: with
// no fetch each of its four streams stalled at every 4 KB page (the hardware prefetcher stops
// there), tinyllama F16 decode's products at 0.66-0.86 of a plain read of the same bytes; 2 KB
// ahead ~1.0, 1 KB and 3-4 KB less (AVX-512 and AVX2, two threads).
constexpr size_t kTokenStreamAheadBytes = 2048;

// Tokens whose activations stay in L2 while a thread streams its weight rows past them: about
// 64, a whole number of token tiles (66 on AVX-512, where 64 left a 4-token tile in every chunk,
// with 1.5x the weight reads per FMA of the 4 x 6 tile).
constexpr size_t kTokenChunk = (64 + kTileTokens - 1) / kTileTokens * kTileTokens;

// Rows [row, row + kRows) (a row_step apart) for tokens [0, n_tokens): single tokens, short
// batches and the rows a prompt panel leaves over. F16/BF16 rows are converted in the tile.
// Not inlined: inside the callers' row loops the compiler ran out of general registers and
// reloaded the tile's row pointers from the stack in its inner loop (+19 % instructions for a
// 2-token product, callgrind).
template <size_t kRows, typename TW>
HWY_NOINLINE void MatMulRowBlock(const char* HWY_RESTRICT w, size_t w_row_bytes, size_t n_in,
                                 const float* HWY_RESTRICT x, size_t x_stride, size_t n_tokens,
                                 const float* HWY_RESTRICT bias, float* HWY_RESTRICT out,
                                 size_t out_stride, size_t row, size_t row_step = 1) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const size_t n_full = n_in / lanes;
  const size_t tail = n_in - n_full * lanes;
  const TW* w_rows[kRows];  // each (n_in)
  HWY_ALIGN TW w_tail[kRows * kMaxF32Lanes];
  for (size_t j = 0; j < kRows; ++j) {
    w_rows[j] = reinterpret_cast<const TW*>(w + (row + j * row_step) * w_row_bytes);
    if (tail != 0) CopyPadded(w_rows[j] + n_full * lanes, tail, w_tail + j * kMaxF32Lanes);
  }
  // Spaced rows are streams: the first token tile reads them from memory and fetches ahead;
  // the others find them in L1/L2.
  if (n_tokens == 1) {
    const size_t token_ahead = row_step != 1 ? kTokenStreamAheadBytes / sizeof(TW) : 0;
    MatMulTile<kRows, 1, TW>(w_rows, w_tail, row_step == 1 ? w_row_bytes / sizeof(TW) : 0, n_full,
                             tail, x, x_stride, bias, out, out_stride, row, row_step, nullptr,
                             false, true, token_ahead);
    return;
  }
  const size_t stream_ahead = row_step != 1 ? kStreamAheadBytes / sizeof(TW) : 0;
  size_t t = 0;
  for (; t + kTileTokens <= n_tokens; t += kTileTokens) {
    MatMulTile<kRows, kTileTokens, TW>(w_rows, w_tail, 0, n_full, tail, x + t * x_stride, x_stride,
                                       bias, out + t * out_stride, out_stride, row, row_step,
                                       nullptr, false, true, t == 0 ? stream_ahead : 0);
  }
  if (t < n_tokens) {
    MatMulLeftoverTokens<kRows, TW>(w_rows, w_tail, n_full, tail, x + t * x_stride, x_stride,
                                    n_tokens - t, bias, out + t * out_stride, out_stride, row,
                                    row_step, nullptr, false, true, t == 0 ? stream_ahead : 0);
  }
}

// Prompts: a panel of up to kPanelBlocks blocks of kTileRows adjacent rows against every token
// of the call, a chunk of kTokenChunk tokens at a time, one token tile at a time against every
// block of the panel. The tile's activations are read from L2 once and then stay in L1 while the
// panel's weights stream past them from L2: a long row is split into k segments whose
// activations fit L1 (the tiles carry their accumulators across segments). F16/BF16 weights are
// widened once per panel (but F16 on AVX-512, kF16PanelsInTile below) into an f32 scratch that
// serves all tokens, so that the tiles, which reuse each weight vector for the whole chunk, spend
// the FMA ports on products: converted in the tile, each weight vector costs an FMA-port uop
// beside its kTileTokens FMAs (at most 0.8 of the FMA roof for 3 x 4). Widening once per 64-token
// chunk instead cost ~12 % of an F16 prompt (perf, tinyllama pp512): the widened rows are
// written to L2, which costs more than the 16 uses per weight vector in a chunk can hide.
constexpr size_t kPanelBlocks = 16;
// L2 bytes for a panel's (widened) rows, a quarter of a 2 MB L2: the chunk's activations and
// the next panel's prefetched rows share the rest. Long rows make the panel shorter.
constexpr size_t kPanelBytes = 512 * 1024;
// L1 bytes for a token tile's activations in one segment, a third of a 48 KB L1 (the rest holds
// the weight streams). gemm_bench F16, AVX2: 16 KB beat 8, 12, 32 and 48 KB. AVX-512's 4 x 6
// tile reads 3x the activation bytes per k step, so 16 KB made its segments 42 vectors long
// and the tiles' per-call costs (resuming and saving 24 accumulators) a larger share: 32 KB (two
// thirds of Zen 5's 48 KB L1) was faster on 6 of gemm_bench's 7 F16 shapes (3-13 %, one thread,
// CPU time, four alternations at load 6-8; 2048 x 5632 -3 %, within the noise).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr size_t kSegmentBytes = 32768;
#else
constexpr size_t kSegmentBytes = 16384;
#endif

// Blocks per panel for rows of n_in elements.
HWY_INLINE size_t PanelBlocks(size_t n_in) {
  const size_t block_bytes = kTileRows * n_in * sizeof(float);
  return std::clamp<size_t>(kPanelBytes / std::max<size_t>(block_bytes, 1), 1, kPanelBlocks);
}

// F16 panels on AVX-512 are not widened: the 4 x 6 tile converts each weight vector
// (`vcvtph2ps`) once for 24 FMAs, which Zen 5 overlaps with them, and the tiles then read half
// the bytes from L2 with no widening pass that waits on the weight read (tinyllama F16 pp128,
// two threads: 1.12-1.90x the t/s of widened panels, four alternations on a loaded host;
// gemm_bench F16, one thread: 1.07-1.48x widening in the first token tile on 2048 x 2048 x
// 128/512, 5632 x 2048 x 128, 2048 x 5632 x 128). AVX2's 3 x 4 tile converts once per 12 FMAs,
// where in-tile conversion measured no faster (0.92-1.15x).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr bool kF16PanelsInTile = true;
#else
constexpr bool kF16PanelsInTile = false;
#endif

template <typename TW>
HWY_INLINE void MatMulPromptPanel(const char* HWY_RESTRICT w, size_t w_row_bytes, size_t n_in,
                                  const float* HWY_RESTRICT x, size_t x_stride, size_t n_tokens,
                                  const float* HWY_RESTRICT bias, float* HWY_RESTRICT out,
                                  size_t out_stride, size_t row, size_t n_blocks,
                                  size_t prefetch_rows) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const size_t n_full = n_in / lanes;
  const size_t tail = n_in - n_full * lanes;
  const size_t panel_rows = n_blocks * kTileRows;
  const TW* w_rows[kPanelBlocks * kTileRows];
  for (size_t r = 0; r < panel_rows; ++r) {
    w_rows[r] = reinterpret_cast<const TW*>(w + (row + r) * w_row_bytes);
  }
  constexpr bool kInTile = kF16PanelsInTile && std::is_same_v<TW, hwy::float16_t>;
  constexpr bool kWiden = !std::is_same_v<TW, float> && !kInTile;
  using TP = std::conditional_t<kWiden, float, TW>;  // the element type the tiles read
  // Zero-padded tails, used by the last segment.
  HWY_ALIGN TP p_tail[kPanelBlocks][kTileRows * kMaxF32Lanes];
  if (tail != 0) {
    for (size_t r = 0; r < panel_rows; ++r) {
      TP* dst = p_tail[r / kTileRows] + (r % kTileRows) * kMaxF32Lanes;
      if constexpr (kWiden) {
        HWY_ALIGN TW padded[kMaxF32Lanes];
        CopyPadded(w_rows[r] + n_full * lanes, tail, padded);
        hn::Store(LoadAsF32(d, padded), d, dst);
      } else {
        CopyPadded(w_rows[r] + n_full * lanes, tail, dst);
      }
    }
  }
  const TP* p_rows[kPanelBlocks * kTileRows];
  if constexpr (kWiden) {
    thread_local Scratch<float> widened_storage;
    float* widened = GrowScratch(widened_storage, panel_rows * n_full * lanes);
    // Each row is its own stream (a 4 KB F16 row is a page, where the hardware prefetcher
    // stops), and a thread's first panel of a row chunk was not prefetched by a panel before
    // it: fetch rows kWidenAheadBytes ahead of the one being widened (at least two rows).
    // Widening a row takes about as many cycles as it has vectors, so two short rows ahead
    // (1.5 KB each for n_in 768) did not cover the memory latency.
    constexpr size_t kWidenAheadBytes = 12288;
    const size_t row_bytes = n_full * lanes * sizeof(TW);
    const size_t widen_ahead =
        std::max<size_t>(2, (kWidenAheadBytes + row_bytes - 1) / std::max<size_t>(row_bytes, 1));
    for (size_t r = 0; r < widen_ahead && r < panel_rows; ++r) {
      PrefetchBytes(w_rows[r], row_bytes);
    }
    for (size_t r = 0; r < panel_rows; ++r) {
      if (r + widen_ahead < panel_rows) PrefetchBytes(w_rows[r + widen_ahead], row_bytes);
      const TW* HWY_RESTRICT src = w_rows[r];
      float* HWY_RESTRICT dst = widened + r * n_full * lanes;
      for (size_t k = 0; k < n_full; ++k) {
        hn::Store(LoadAsF32(d, src + k * lanes), d, dst + k * lanes);
      }
      p_rows[r] = dst;
    }
  } else {
    for (size_t r = 0; r < panel_rows; ++r) p_rows[r] = w_rows[r];
  }
  const size_t seg_cap = std::max<size_t>(1, kSegmentBytes / (kTileTokens * sizeof(float) * lanes));
  const size_t n_segments = std::max<size_t>(1, (n_full + seg_cap - 1) / seg_cap);
  const size_t seg_vecs = (n_full + n_segments - 1) / n_segments;
  const size_t chunk_tiles = (kTokenChunk + kTileTokens - 1) / kTileTokens;
  thread_local Scratch<float> saved_storage;
  float* saved = n_segments > 1 ? GrowScratch(saved_storage, chunk_tiles * n_blocks * kTileRows *
                                                                 kTileTokens * lanes)
                                : nullptr;
  // The next panel's rows are prefetched a few lines per tile, spread over this panel's work.
  const char* next = w + (row + panel_rows) * w_row_bytes;
  const size_t next_lines = prefetch_rows * w_row_bytes / 64;
  const size_t calls =
      n_segments * ((n_tokens + kTileTokens - 1) / kTileTokens) * n_blocks;
  const size_t lines_per_call = (next_lines + calls - 1) / calls;
  size_t line = 0;
  for (size_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
    const size_t chunk = std::min(kTokenChunk, n_tokens - t0);
    const size_t n_tiles = (chunk + kTileTokens - 1) / kTileTokens;
    for (size_t s = 0; s < n_segments; ++s) {
      const size_t k0 = s * seg_vecs;
      const size_t k1 = std::min(n_full, k0 + seg_vecs);
      const bool last = s + 1 == n_segments;
      const float* x_seg = x + t0 * x_stride + k0 * lanes;
      for (size_t i = 0; i < n_tiles; ++i) {
        const size_t t = i * kTileTokens;
        const size_t out_t = t0 + t;
        for (size_t b = 0; b < n_blocks; ++b) {
          for (size_t l = 0; l < lines_per_call && line < next_lines; ++l, ++line) {
            hwy::Prefetch(next + line * 64);
          }
          float* tile_saved =
              saved ? saved + (i * n_blocks + b) * kTileRows * kTileTokens * lanes : nullptr;
          const TP* block_rows[kTileRows];
          for (size_t j = 0; j < kTileRows; ++j) block_rows[j] = p_rows[b * kTileRows + j] + k0 * lanes;
          const size_t block_row = row + b * kTileRows;
          if (t + kTileTokens <= chunk) {
            MatMulTile<kTileRows, kTileTokens, TP>(
                block_rows, p_tail[b], 0, k1 - k0, last ? tail : 0, x_seg + t * x_stride,
                x_stride, bias, out + out_t * out_stride, out_stride, block_row, 1, tile_saved,
                s != 0, last);
          } else {
            MatMulLeftoverTokens<kTileRows, TP>(block_rows, p_tail[b], k1 - k0, last ? tail : 0,
                                                x_seg + t * x_stride, x_stride, chunk - t, bias,
                                                out + out_t * out_stride, out_stride, block_row, 1,
                                                tile_saved, s != 0, last);
          }
        }
      }
    }
  }
}

// Rows [row_begin, row_end) for one token or a short batch, in blocks of kRows rows that sit
// 1/kRows of the range apart, so that each row of a block is one long sequential stream the
// hardware prefetcher follows (adjacent short rows are kRows brief streams it never ramps up on).
// A block's rows are read from memory once for all the tokens: the first token tile brings them
// in, the others find them in L1/L2, and F16/BF16 rows are converted in the tiles. For a few
// tokens the product is bound by that one read of the weights, not by the FMA units, so the
// prompt panels' widening (a store and a reload of every weight in f32) would only add to it.
template <size_t kRows, typename TW>
HWY_INLINE void MatMulSpacedRows(const char* HWY_RESTRICT w, size_t w_row_bytes, size_t n_in,
                                 const float* HWY_RESTRICT x, size_t x_stride, size_t n_tokens,
                                 const float* HWY_RESTRICT bias, float* HWY_RESTRICT out,
                                 size_t out_stride, size_t row_begin, size_t row_end) {
  const size_t step = (row_end - row_begin) / kRows;
  for (size_t i = 0; i < step; ++i) {
    MatMulRowBlock<kRows, TW>(w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride,
                              row_begin + i, step);
  }
  for (size_t row = row_begin + kRows * step; row < row_end; ++row) {
    MatMulRowBlock<1, TW>(w, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride, row);
  }
}

// The HostKernels::mat_mul contract for weights of element type TW.
template <typename TW>
HWY_INLINE void MatMulImpl(const void* w, size_t w_row_bytes, size_t n_in, const float* x,
                           size_t x_stride, size_t n_tokens, const float* bias, float* out,
                           size_t out_stride, size_t row_begin, size_t row_end) {
  const char* w_bytes = static_cast<const char*>(w);
  if (n_tokens == 1) {
    // Matrix-vector: memory-bound; four streams (only one accumulator per row).
    MatMulSpacedRows<4, TW>(w_bytes, w_row_bytes, n_in, x, x_stride, 1, bias, out, out_stride,
                            row_begin, row_end);
    return;
  }
  if (n_tokens <= kShortBatchTokens) {
    // Speculative verification, a server step's decoding sequences: still bound by the weight
    // read, which the panels below would make a widening pass plus a compute pass.
    MatMulSpacedRows<kTileRows, TW>(w_bytes, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out,
                                    out_stride, row_begin, row_end);
    return;
  }
  // Prompts: panels of rows against all tokens, then the rows left over, chunk by chunk.
  static_assert(kShortBatchTokens >= 2 * kTileTokens, "a panel holds two token tiles or more");
  size_t row = row_begin;
  const size_t panel_blocks = PanelBlocks(n_in);
  while (row + kTileRows <= row_end) {
    const size_t blocks = std::min(panel_blocks, (row_end - row) / kTileRows);
    const size_t rows_after = row_end - (row + blocks * kTileRows);
    MatMulPromptPanel<TW>(w_bytes, w_row_bytes, n_in, x, x_stride, n_tokens, bias, out, out_stride,
                          row, blocks, std::min(rows_after, blocks * kTileRows));
    row += blocks * kTileRows;
  }
  for (size_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
    const size_t chunk = n_tokens - t0 < kTokenChunk ? n_tokens - t0 : kTokenChunk;
    const float* x_chunk = x + t0 * x_stride;
    float* out_chunk = out + t0 * out_stride;
    size_t r = row;
    for (; r + kTileRows <= row_end; r += kTileRows) {
      MatMulRowBlock<kTileRows, TW>(w_bytes, w_row_bytes, n_in, x_chunk, x_stride, chunk, bias,
                                    out_chunk, out_stride, r);
    }
    for (; r < row_end; ++r) {
      MatMulRowBlock<1, TW>(w_bytes, w_row_bytes, n_in, x_chunk, x_stride, chunk, bias, out_chunk,
                            out_stride, r);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
