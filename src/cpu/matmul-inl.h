// Per-target mat_mul body shared by the per-weight-type TUs (matmul_f32.cc, matmul_f16.cc, ...).

#if defined(PETREL_CPU_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PETREL_CPU_MATMUL_INL_H_
#undef PETREL_CPU_MATMUL_INL_H_
#else
#define PETREL_CPU_MATMUL_INL_H_
#endif

#include <cstddef>

#include "cpu/simd-inl.h"       // LoadAsF32, CopyPadded
#include "hwy/cache_control.h"  // Prefetch
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Register tile: kRows weight rows x kTokens tokens, one accumulator per (row, token): full
// vector k of the row, then the zero-padded tail, go into it in order, and the result is its
// SumOfLanes. Each weight vector is loaded (and widened) once per tile and used for kTokens
// tokens; each activation vector once and used for kRows rows. The summation order of every
// (row, token) pair is the same for any tile shape, so results do not depend on batching or
// row splits. (One accumulator per pair rather than two leaves registers for a 3 x 4 tile on
// 16-register targets, which is what keeps the FMA units, not the loads, the limit.)
template <size_t kRows, size_t kTokens, typename TW>
HWY_INLINE void MatMulTile(const TW* const* HWY_RESTRICT w_rows, const TW* HWY_RESTRICT w_tail,
                           size_t row_stride_elems, size_t n_full, size_t tail,
                           const float* HWY_RESTRICT x, size_t x_stride,
                           const float* HWY_RESTRICT bias, float* HWY_RESTRICT out,
                           size_t out_stride, size_t row, size_t row_step) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t lanes = hn::Lanes(d);
  V acc[kRows][kTokens];
  for (size_t j = 0; j < kRows; ++j) {
    for (size_t t = 0; t < kTokens; ++t) acc[j][t] = hn::Zero(d);
  }
  // Matrix-vector products stream rows that are short (a few KB) and read kRows at a time, too
  // briefly for the hardware prefetcher to ramp up on each; prefetch the same place kRows rows
  // ahead, so the next row block is in flight while this one is computed.
  // At least ~12 KB ahead: with short rows one block ahead is too close to hide the latency.
  const size_t block_elems = kRows * row_stride_elems;
  const size_t ahead = block_elems * (1 + (12288 / sizeof(TW)) / (block_elems + 1));
  for (size_t k = 0; k < n_full; ++k) {
    if (kTokens == 1 && row_stride_elems != 0 && k % 2 == 0) {
      for (size_t j = 0; j < kRows; ++j) {
        hwy::Prefetch(w_rows[j] + ahead + k * lanes);
        hwy::Prefetch(w_rows[j] + ahead + (k + 1) * lanes);
      }
    }
    V wv[kRows];
    for (size_t j = 0; j < kRows; ++j) wv[j] = LoadAsF32(d, w_rows[j] + k * lanes);
    for (size_t t = 0; t < kTokens; ++t) {
      const V xv = hn::LoadU(d, x + t * x_stride + k * lanes);
      for (size_t j = 0; j < kRows; ++j) acc[j][t] = hn::MulAdd(wv[j], xv, acc[j][t]);
    }
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
    for (size_t j = 0; j < kRows; ++j) {
      const size_t r = row + j * row_step;
      out[t * out_stride + r] = hn::GetLane(hn::SumOfLanes(d, acc[j][t])) + (bias ? bias[r] : 0.0f);
    }
  }
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
// Tokens whose activations stay in L2 while a thread streams its weight rows past them.
constexpr size_t kTokenChunk = 64;

// Rows [row, row + kRows) for tokens [0, n_tokens): widened tails prepared once, then tiles.
template <size_t kRows, typename TW>
HWY_INLINE void MatMulRowBlock(const char* HWY_RESTRICT w, size_t w_row_bytes, size_t n_in,
                               const float* HWY_RESTRICT x, size_t x_stride, size_t n_tokens,
                               const float* HWY_RESTRICT bias, float* HWY_RESTRICT out,
                               size_t out_stride, size_t row, size_t row_step = 1,
                               size_t prefetch_rows = 0) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const size_t n_full = n_in / lanes;
  const size_t tail = n_in - n_full * lanes;
  const TW* w_rows[kRows];  // each (n_in)
  HWY_ALIGN TW w_tail[kRows * kMaxF32Lanes];
  const size_t row_stride_elems = w_row_bytes / sizeof(TW);
  for (size_t j = 0; j < kRows; ++j) {
    w_rows[j] = reinterpret_cast<const TW*>(w + (row + j * row_step) * w_row_bytes);
    if (tail != 0) CopyPadded(w_rows[j] + n_full * lanes, tail, w_tail + j * kMaxF32Lanes);
  }
  // A prompt reads the next row block while this one is computed: rows of a few KB each start
  // a new page, where the hardware prefetcher stops, so the first tile of each block would
  // otherwise wait on DRAM once per row (measured: an eighth of the F16 prompt time). F16/BF16
  // rows are converted in the tile rather than widened into a scratch first: half the bytes keep
  // the tile's weights and activations in L1 together, which measured 0.71-0.73 of the FMA roof
  // per AVX2 core against 0.63-0.68 for widened rows.
  const size_t n_tiles = n_tokens / kTileTokens;
  const bool prompt = n_tokens >= 2 * kTileTokens && row_step == 1;
  const char* next = reinterpret_cast<const char*>(w_rows[kRows - 1]) + w_row_bytes;
  const size_t next_lines = prompt ? prefetch_rows * w_row_bytes / 64 : 0;
  const size_t lines_per_tile = n_tiles ? (next_lines + n_tiles - 1) / n_tiles : 0;
  size_t t = 0;
  for (size_t i = 0; i < n_tiles; ++i, t += kTileTokens) {
    for (size_t l = i * lines_per_tile; l < (i + 1) * lines_per_tile && l < next_lines; ++l) {
      hwy::Prefetch(next + l * 64);
    }
    MatMulTile<kRows, kTileTokens, TW>(w_rows, w_tail, 0, n_full, tail, x + t * x_stride, x_stride,
                                       bias, out + t * out_stride, out_stride, row, row_step);
  }
  for (; t < n_tokens; ++t) {
    MatMulTile<kRows, 1, TW>(w_rows, w_tail, row_step == 1 ? row_stride_elems : 0, n_full, tail,
                             x + t * x_stride, x_stride, bias, out + t * out_stride, out_stride,
                             row, row_step);
  }
}

// The HostKernels::mat_mul contract for weights of element type TW.
template <typename TW>
HWY_INLINE void MatMulImpl(const void* w, size_t w_row_bytes, size_t n_in, const float* x,
                           size_t x_stride, size_t n_tokens, const float* bias, float* out,
                           size_t out_stride, size_t row_begin, size_t row_end) {
  const char* w_bytes = static_cast<const char*>(w);
  if (n_tokens == 1) {
    // Matrix-vector: memory-bound. The four rows of a pass sit a quarter of the range apart, so
    // each is a long sequential stream the hardware prefetcher follows (adjacent short rows are
    // four brief streams it never ramps up on).
    const size_t quarter = (row_end - row_begin) / 4;
    for (size_t i = 0; i < quarter; ++i) {
      MatMulRowBlock<4, TW>(w_bytes, w_row_bytes, n_in, x, x_stride, 1, bias, out, out_stride,
                            row_begin + i, quarter);
    }
    for (size_t row = row_begin + 4 * quarter; row < row_end; ++row) {
      MatMulRowBlock<1, TW>(w_bytes, w_row_bytes, n_in, x, x_stride, 1, bias, out, out_stride, row);
    }
    return;
  }
  for (size_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
    const size_t chunk = n_tokens - t0 < kTokenChunk ? n_tokens - t0 : kTokenChunk;
    const float* x_chunk = x + t0 * x_stride;
    float* out_chunk = out + t0 * out_stride;
    size_t row = row_begin;
    for (; row + kTileRows <= row_end; row += kTileRows) {
      const size_t rows_after = row_end - (row + kTileRows);
      MatMulRowBlock<kTileRows, TW>(w_bytes, w_row_bytes, n_in, x_chunk, x_stride, chunk, bias,
                                    out_chunk, out_stride, row, 1,
                                    rows_after < kTileRows ? rows_after : kTileRows);
    }
    for (; row < row_end; ++row) {
      MatMulRowBlock<1, TW>(w_bytes, w_row_bytes, n_in, x_chunk, x_stride, chunk, bias, out_chunk,
                            out_stride, row);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
