// mat_mul of F16/BF16 weights on `vdpbf16ps` (bf16_dot.h). Highway 1.0.3 has no target with
// AVX512-BF16, so this TU is plain intrinsics in functions compiled for it by target attributes
// (the rest of the file, and whatever it inlines from headers, stays at the build's baseline),
// chosen at run time by a CPUID check of our own.
#include "cpu/matmul/bf16_dot.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/base/status.h"               // PETREL_CHECK
#include "cpu/threading/host_work_split.h"  // kShortBatchTokens
#include "hwy/targets.h"                    // SupportedTargets

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define PETREL_BF16_DOT_X86 1
#else
#define PETREL_BF16_DOT_X86 0
#endif

namespace petrel::cpu {
#if PETREL_BF16_DOT_X86
// GCC 12's intrinsics pass `_mm512_undefined_*()` as the unused operand of their all-lanes
// forms (`_mm512_cvtph_ps`, `_mm512_extractf32x8_ps`), which -Wmaybe-uninitialized reports
// wherever they are inlined; Highway's own ops avoid these forms.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace {

#define PETREL_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,f16c,fma")))

// bfloat16 elements per 512-bit vector: one `vdpbf16ps` step of a (row, token) pair.
constexpr size_t kBlockElems = 32;
// Register tile: 24 accumulators, 4 weight vectors and one activation vector of 32 registers,
// as the f32 tile on AVX-512 (matmul-inl.h); one weight vector serves 6 `vdpbf16ps`.
constexpr size_t kTileRows = 4;
constexpr size_t kTileTokens = 6;
// A prompt panel's bfloat16 rows (F16 rounded into a scratch), which stay in L2 while every
// token tile passes them.
constexpr size_t kPanelBytes = 256 * 1024;
constexpr size_t kPanelBlocks = 16;
// A token tile's bfloat16 activations in one k segment, kept in L1 (half of Zen 5's 48 KB)
// while the panel's rows stream past them.
// 12 KB and 6 KB were slower on all four tinyllama shapes (onednn_matmul_bench, one pass each).
constexpr size_t kSegmentBytes = 24 * 1024;
// Single tokens and short batches read each row once from memory: fetch each of the four row
// streams this far ahead (the hardware prefetcher stops at 4 KB pages; as kTokenStreamAheadBytes
// in matmul-inl.h).
constexpr size_t kStreamAheadBytes = 2048;

template <bool kF16>
PETREL_BF16_TARGET inline __m512bh LoadWeightsAsBf16(const uint16_t* p) {
  if constexpr (kF16) {
    const __m512 lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512 hi =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
    return _mm512_cvtne2ps_pbh(hi, lo);  // rounds to nearest even; lo in the low 16 lanes
  } else {
    return (__m512bh)_mm512_loadu_si512(p);
  }
}

// The tree of bf16_dot.h: s[i] + s[i + 8], + [i + 4], + [i + 2], lane 0 + lane 1.
PETREL_BF16_TARGET inline float SumLanes(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

// SumLanes of four vectors at once, the same additions in the same order: each vector halved
// twice (s[i] + s[i + 8], then + [i + 4]), then the pairs transposed so that one add does
// [i] + [i + 2] and one lane 0 + lane 1 for all four. A 4 x 6 tile's 24 separate reductions took
// about a tenth of its instructions on 2048-element rows.
PETREL_BF16_TARGET inline __m128 SumLanes4(__m512 a, __m512 b, __m512 c, __m512 d) {
  __m128 quarter[4];
  const __m512 v[4] = {a, b, c, d};
  for (size_t i = 0; i < 4; ++i) {
    const __m256 h =
        _mm256_add_ps(_mm512_castps512_ps256(v[i]), _mm512_extractf32x8_ps(v[i], 1));
    quarter[i] = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  }
  // [a0 + a2, b0 + b2, a1 + a3, b1 + b3] and the same for c, d.
  const __m128 p = _mm_add_ps(_mm_unpacklo_ps(quarter[0], quarter[1]),
                              _mm_unpackhi_ps(quarter[0], quarter[1]));
  const __m128 q = _mm_add_ps(_mm_unpacklo_ps(quarter[2], quarter[3]),
                              _mm_unpackhi_ps(quarter[2], quarter[3]));
  return _mm_add_ps(_mm_movelh_ps(p, q), _mm_movehl_ps(q, p));
}

// The first `n` (< 32) lanes.
inline __mmask32 FirstLanes(size_t n) { return __mmask32(n >= 32 ? ~0u : (1u << n) - 1); }

PETREL_BF16_TARGET void RoundToBf16(const float* x, size_t n, uint16_t* out) {
  for (size_t k = 0; k < n; k += kBlockElems) {
    const size_t rest = std::min(n - k, kBlockElems);
    const __mmask16 lo_mask = __mmask16(rest >= 16 ? 0xFFFF : (1u << rest) - 1);
    const __mmask16 hi_mask = __mmask16(rest > 16 ? (1u << (rest - 16)) - 1 : 0);
    const __m512 lo = _mm512_maskz_loadu_ps(lo_mask, x + k);
    const __m512 hi = _mm512_maskz_loadu_ps(hi_mask, x + k + 16);
    _mm512_mask_storeu_epi16(out + k, FirstLanes(rest), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}

// A row's last `tail` (< 32) elements as one zero-padded bfloat16 block, rounded as in the tile.
template <bool kF16>
PETREL_BF16_TARGET void TailAsBf16(const uint16_t* src, size_t tail, uint16_t* dst) {
  alignas(64) uint16_t padded[kBlockElems] = {};
  std::memcpy(padded, src, tail * sizeof(uint16_t));
  _mm512_storeu_si512(dst, (__m512i)LoadWeightsAsBf16<kF16>(padded));
}

// n_blocks blocks of 32 F16 weights as bfloat16, rounded as in the tile.
PETREL_BF16_TARGET void RoundF16RowToBf16(const uint16_t* src, size_t n_blocks, uint16_t* dst) {
  for (size_t b = 0; b < n_blocks; ++b) {
    _mm512_storeu_si512(dst + b * kBlockElems,
                        (__m512i)LoadWeightsAsBf16<true>(src + b * kBlockElems));
  }
}

// kRows rows x kTokens tokens over `n_blocks` blocks of 32 from `rows` (one pointer per row at
// the segment's first block) and the activations `xb` (token t at xb + t * xb_stride), one
// accumulator per (row, token). kResume starts from `saved` (kRows * kTokens vectors), else from
// zero; kFinish adds the zero-padded tail block (`tails`, 32 bfloat16 per row, when the rows
// have a tail of `tail` elements: its activations follow the segment's, read masked to the
// row's end) and writes out[t][row + j * row_step],
// else stores the accumulators to `saved`. The order of every pair's sums is the same for any
// tile, segment or batch: bf16_dot.h's.
template <size_t kRows, size_t kTokens, bool kF16, bool kResume, bool kFinish>
PETREL_BF16_TARGET __attribute__((noinline)) void Tile(
    const uint16_t* const* rows, size_t n_blocks, const uint16_t* tails, size_t tail,
    const uint16_t* xb, size_t xb_stride, float* saved, const float* bias, float* out,
    size_t out_stride, size_t row, size_t row_step, size_t stream_ahead) {
  __m512 acc[kRows][kTokens];
  for (size_t j = 0; j < kRows; ++j) {
    for (size_t t = 0; t < kTokens; ++t) {
      acc[j][t] = kResume ? _mm512_loadu_ps(saved + (j * kTokens + t) * 16) : _mm512_setzero_ps();
    }
  }
  const uint16_t* r[kRows];
  for (size_t j = 0; j < kRows; ++j) r[j] = rows[j];
  for (size_t b = 0; b < n_blocks; ++b) {
    if (stream_ahead != 0) {
      for (size_t j = 0; j < kRows; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(r[j] + stream_ahead + b * kBlockElems),
                     _MM_HINT_T0);
      }
    }
    __m512bh wv[kRows];
    for (size_t j = 0; j < kRows; ++j) wv[j] = LoadWeightsAsBf16<kF16>(r[j] + b * kBlockElems);
    for (size_t t = 0; t < kTokens; ++t) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + t * xb_stride + b * kBlockElems);
      for (size_t j = 0; j < kRows; ++j) acc[j][t] = _mm512_dpbf16_ps(acc[j][t], wv[j], xv);
    }
  }
  if constexpr (!kFinish) {
    for (size_t j = 0; j < kRows; ++j) {
      for (size_t t = 0; t < kTokens; ++t) _mm512_storeu_ps(saved + (j * kTokens + t) * 16, acc[j][t]);
    }
    return;
  } else {
    if (tails != nullptr) {
      for (size_t j = 0; j < kRows; ++j) {
        const __m512bh wv = LoadWeightsAsBf16<false>(tails + j * kBlockElems);
        for (size_t t = 0; t < kTokens; ++t) {
          const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(
              FirstLanes(tail), xb + t * xb_stride + n_blocks * kBlockElems);
          acc[j][t] = _mm512_dpbf16_ps(acc[j][t], wv, xv);
        }
      }
    }
    for (size_t t = 0; t < kTokens; ++t) {
      alignas(16) float sums[kRows < 4 ? 4 : kRows];
      if constexpr (kRows % 4 == 0) {
        for (size_t j = 0; j < kRows; j += 4) {
          _mm_store_ps(sums + j, SumLanes4(acc[j][t], acc[j + 1][t], acc[j + 2][t], acc[j + 3][t]));
        }
      } else {
        for (size_t j = 0; j < kRows; ++j) sums[j] = SumLanes(acc[j][t]);
      }
      for (size_t j = 0; j < kRows; ++j) {
        const size_t out_row = row + j * row_step;
        out[t * out_stride + out_row] = sums[j] + (bias ? bias[out_row] : 0.0f);
      }
    }
  }
}

// Tile<kRows, n_tokens> for n_tokens in [1, kTileTokens], with the segment flags as template
// arguments (as run-time flags the compiler kept the accumulators in memory: matmul-inl.h).
template <size_t kRows, bool kF16>
void RunTile(size_t n_tokens, bool resume, bool finish, const uint16_t* const* rows,
             size_t n_blocks, const uint16_t* tails, size_t tail, const uint16_t* xb,
             size_t xb_stride,
             float* saved, const float* bias, float* out, size_t out_stride, size_t row,
             size_t row_step, size_t stream_ahead) {
  using TileFn = void (*)(const uint16_t* const*, size_t, const uint16_t*, size_t,
                          const uint16_t*, size_t, float*, const float*, float*, size_t, size_t,
                          size_t, size_t);
#define PETREL_TILE_ROW(N)                                                                  \
  {&Tile<kRows, N, kF16, false, false>, &Tile<kRows, N, kF16, false, true>,                 \
   &Tile<kRows, N, kF16, true, false>, &Tile<kRows, N, kF16, true, true>}
  static constexpr TileFn kTiles[kTileTokens][4] = {
      PETREL_TILE_ROW(1), PETREL_TILE_ROW(2), PETREL_TILE_ROW(3),
      PETREL_TILE_ROW(4), PETREL_TILE_ROW(5), PETREL_TILE_ROW(6)};
#undef PETREL_TILE_ROW
  PETREL_CHECK(n_tokens >= 1 && n_tokens <= kTileTokens);
  kTiles[n_tokens - 1][(resume ? 2 : 0) + (finish ? 1 : 0)](
      rows, n_blocks, tails, tail, xb, xb_stride, saved, bias, out, out_stride, row, row_step,
      stream_ahead);
}

// Activations of one call, rounded to bfloat16 once per thread (a small share of the products:
// each token row is rounded once for all the rows this thread multiplies it with).
struct RoundedActivations {
  const uint16_t* xb;  // (n_tokens, stride)
  size_t stride;       // elements, at least n_in
};

RoundedActivations RoundActivations(const float* x, size_t x_stride, size_t n_tokens,
                                    size_t n_in) {
  thread_local std::vector<uint16_t> storage;
  if (storage.size() < n_tokens * n_in) storage.resize(n_tokens * n_in);
  for (size_t t = 0; t < n_tokens; ++t) {
    RoundToBf16(x + t * x_stride, n_in, storage.data() + t * n_in);
  }
  return {storage.data(), n_in};
}

// Single tokens and short batches: blocks of kTileRows rows a quarter of the range apart, so
// that each is one long stream (as MatMulSpacedRows, matmul-inl.h), each read once for all
// tokens, then the rows left over one by one.
template <bool kF16>
void ShortBatch(const char* w, size_t w_row_bytes, size_t n_in, const RoundedActivations& x,
                size_t n_tokens, const float* bias, float* out, size_t out_stride,
                size_t row_begin, size_t row_end) {
  const size_t n_full = n_in / kBlockElems;
  const size_t tail = n_in % kBlockElems;
  const size_t step = (row_end - row_begin) / kTileRows;
  const size_t ahead = kStreamAheadBytes / sizeof(uint16_t);
  alignas(64) uint16_t tails[kTileRows * kBlockElems];
  auto run = [&]<size_t kRows>(size_t first_row, size_t row_step) {
    const uint16_t* rows[kRows];
    for (size_t j = 0; j < kRows; ++j) {
      rows[j] = reinterpret_cast<const uint16_t*>(w + (first_row + j * row_step) * w_row_bytes);
      if (tail != 0) TailAsBf16<kF16>(rows[j] + n_full * kBlockElems, tail, tails + j * kBlockElems);
    }
    for (size_t t = 0; t < n_tokens; t += kTileTokens) {
      RunTile<kRows, kF16>(std::min(kTileTokens, n_tokens - t), false, true, rows, n_full,
                           tail != 0 ? tails : nullptr, tail, x.xb + t * x.stride, x.stride,
                           nullptr,
                           bias, out + t * out_stride, out_stride, first_row, row_step,
                           t == 0 && row_step != 1 ? ahead : 0);
    }
  };
  for (size_t i = 0; i < step; ++i) run.template operator()<kTileRows>(row_begin + i, step);
  for (size_t r = row_begin + kTileRows * step; r < row_end; ++r) run.template operator()<1>(r, 1);
}

// Prompts: panels of up to kPanelBlocks blocks of kTileRows adjacent rows, each against every
// token tile of the call; a long row is split into k segments whose activations stay in L1
// (the tiles carry their accumulators across segments, which leaves the sums' order as is).
template <bool kF16>
void Prompt(const char* w, size_t w_row_bytes, size_t n_in, const RoundedActivations& x,
            size_t n_tokens, const float* bias, float* out, size_t out_stride, size_t row_begin,
            size_t row_end) {
  const size_t n_full = n_in / kBlockElems;
  const size_t tail = n_in % kBlockElems;
  const size_t seg_cap = std::max<size_t>(1, kSegmentBytes / (kTileTokens * kBlockElems * 2));
  const size_t n_segments = std::max<size_t>(1, (n_full + seg_cap - 1) / seg_cap);
  const size_t seg_blocks = (n_full + n_segments - 1) / n_segments;
  const size_t panel_blocks = std::clamp<size_t>(
      kPanelBytes / std::max<size_t>(1, kTileRows * n_in * sizeof(uint16_t)), 1, kPanelBlocks);
  constexpr size_t kTileFloats = kTileRows * kTileTokens * 16;
  thread_local std::vector<float> saved_storage;
  if (saved_storage.size() < kPanelBlocks * kTileFloats) saved_storage.resize(kPanelBlocks * kTileFloats);
  float* saved = saved_storage.data();
  alignas(64) uint16_t tails[kPanelBlocks * kTileRows * kBlockElems];
  size_t row = row_begin;
  while (row + kTileRows <= row_end) {
    const size_t n_blocks = std::min(panel_blocks, (row_end - row) / kTileRows);
    const uint16_t* rows[kPanelBlocks * kTileRows];
    for (size_t r = 0; r < n_blocks * kTileRows; ++r) {
      rows[r] = reinterpret_cast<const uint16_t*>(w + (row + r) * w_row_bytes);
      if (tail != 0) TailAsBf16<kF16>(rows[r] + n_full * kBlockElems, tail, tails + r * kBlockElems);
    }
    if constexpr (kF16) {
      // F16 panels are rounded to bfloat16 once, into an L2 scratch that every token tile
      // reads: converted in the tile, each weight vector cost two `vcvtph2ps` and a
      // `vcvtne2ps2bf16` beside its 6 dot steps. Same rounding, same bits.
      thread_local std::vector<uint16_t> panel_storage;
      const size_t panel_elems = n_blocks * kTileRows * n_full * kBlockElems;
      if (panel_storage.size() < panel_elems) panel_storage.resize(panel_elems);
      for (size_t r = 0; r < n_blocks * kTileRows; ++r) {
        uint16_t* dst = panel_storage.data() + r * n_full * kBlockElems;
        RoundF16RowToBf16(rows[r], n_full, dst);
        rows[r] = dst;
      }
    }
    for (size_t t = 0; t < n_tokens; t += kTileTokens) {
      const size_t tile_tokens = std::min(kTileTokens, n_tokens - t);
      for (size_t s = 0; s < n_segments; ++s) {
        const size_t k0 = s * seg_blocks;
        const size_t k1 = std::min(n_full, k0 + seg_blocks);
        const bool last = s + 1 == n_segments;
        for (size_t b = 0; b < n_blocks; ++b) {
          const uint16_t* block_rows[kTileRows];
          for (size_t j = 0; j < kTileRows; ++j) {
            block_rows[j] = rows[b * kTileRows + j] + k0 * kBlockElems;
          }
          RunTile<kTileRows, false>(tile_tokens, s != 0, last, block_rows, k1 - k0,
                                   tail != 0 ? tails + b * kTileRows * kBlockElems : nullptr,
                                   last ? tail : 0, x.xb + t * x.stride + k0 * kBlockElems, x.stride,
                                   saved + b * kTileFloats, bias, out + t * out_stride,
                                   out_stride, row + b * kTileRows, 1, 0);
        }
      }
    }
    row += n_blocks * kTileRows;
  }
  if (row < row_end) {
    ShortBatch<kF16>(w, w_row_bytes, n_in, x, n_tokens, bias, out, out_stride, row, row_end);
  }
}

bool CpuHasAvx512Bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  return (eax >> 5) & 1;
}

}  // namespace

bool Bf16DotSupported() {
  static const bool kSupported = CpuHasAvx512Bf16() &&
                                 (hwy::SupportedTargets() & (HWY_AVX3 | HWY_AVX3_DL)) != 0;
  return kSupported;
}

void RoundRowToBf16(const float* x, size_t n, uint16_t* out) { RoundToBf16(x, n, out); }

void MatMulBf16DotRounded(DType w_type, const void* w, size_t w_row_bytes, size_t n_in,
                          const void* xb, size_t xb_row_bytes, size_t n_tokens, const float* bias,
                          float* out, size_t out_stride, size_t row_begin, size_t row_end) {
  PETREL_CHECK((w_type == DType::kF16 || w_type == DType::kBF16) && Bf16DotSupported());
  if (n_tokens == 0 || row_begin >= row_end) return;
  const RoundedActivations x{static_cast<const uint16_t*>(xb), xb_row_bytes / sizeof(uint16_t)};
  const char* w_bytes = static_cast<const char*>(w);
  const bool short_batch = n_tokens <= kShortBatchTokens;
  if (w_type == DType::kF16) {
    if (short_batch) {
      return ShortBatch<true>(w_bytes, w_row_bytes, n_in, x, n_tokens, bias, out, out_stride,
                              row_begin, row_end);
    }
    return Prompt<true>(w_bytes, w_row_bytes, n_in, x, n_tokens, bias, out, out_stride,
                        row_begin, row_end);
  }
  if (short_batch) {
    return ShortBatch<false>(w_bytes, w_row_bytes, n_in, x, n_tokens, bias, out, out_stride,
                             row_begin, row_end);
  }
  Prompt<false>(w_bytes, w_row_bytes, n_in, x, n_tokens, bias, out, out_stride, row_begin,
                row_end);
}

void MatMulBf16Dot(DType w_type, const void* w, size_t w_row_bytes, size_t n_in, const float* x,
                   size_t x_stride, size_t n_tokens, const float* bias, float* out,
                   size_t out_stride, size_t row_begin, size_t row_end) {
  if (n_tokens == 0 || row_begin >= row_end) return;
  const RoundedActivations xb = RoundActivations(x, x_stride, n_tokens, n_in);
  MatMulBf16DotRounded(w_type, w, w_row_bytes, n_in, xb.xb, xb.stride * sizeof(uint16_t),
                       n_tokens, bias, out, out_stride, row_begin, row_end);
}

#else  // not x86-64: no AVX512-BF16

bool Bf16DotSupported() { return false; }

void MatMulBf16Dot(DType, const void*, size_t, size_t, const float*, size_t, size_t,
                   const float*, float*, size_t, size_t, size_t) {
  PETREL_CHECK(false && "MatMulBf16Dot: no AVX512-BF16 in this build");
}

void RoundRowToBf16(const float*, size_t, uint16_t*) {
  PETREL_CHECK(false && "RoundRowToBf16: no AVX512-BF16 in this build");
}

void MatMulBf16DotRounded(DType, const void*, size_t, size_t, const void*, size_t, size_t,
                          const float*, float*, size_t, size_t, size_t) {
  PETREL_CHECK(false && "MatMulBf16DotRounded: no AVX512-BF16 in this build");
}

#endif

}  // namespace petrel::cpu
