// The rows-in-lanes mat_mul driver (quant_lanes-inl.h explains the layout and holds the packing
// and dot helpers and the shared Formats): single tokens and short batches on spread row streams
// packed in registers (LaneMatVec), longer batches on row groups packed once per token chunk
// into an L1 scratch (LaneMatMat), and the mat_mul contract that picks between them
// (LaneMatMulImpl). Included by the per-format TUs after their Format.

#if defined(PETREL_CPU_QUANT_LANES_DRIVER_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PETREL_CPU_QUANT_LANES_DRIVER_INL_H_
#undef PETREL_CPU_QUANT_LANES_DRIVER_INL_H_
#else
#define PETREL_CPU_QUANT_LANES_DRIVER_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cpu/matmul/quant_lanes-inl.h"
#include "cpu/matmul/quant_lanes_paired-inl.h"
#include "cpu/simd/simd-inl.h"  // Scratch, GrowScratch
#include "hwy/cache_control.h"  // Prefetch
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {

#if PETREL_QUANT_SIMD
// How far ahead of Pack each of a single token's kLaneRows row streams is fetched. The hardware
// prefetcher alone left one thread at 18 GB/s on Q4_0 weights from memory; quant_bench's
// BM_QuantMatVecFromMemory, one thread, CPU time, two runs each at load 5, GB/s without -> 512 B
// / 1 KB / 2 KB ahead: Q4_0 18.2 -> 20.0 / 21.7 / 21.6 (AVX2 target 16.6 -> 19.0 / 19.7 / 14.1),
// Q8_0 22.2 -> 23.8 / 24.4 / 26.6, Q4_K 16.9 -> 20.1 / 19.7 / 19.6, Q6_K 16.0 -> 18.5 / 18.5 /
// 17.6, IQ4_XS 15.3 -> 14.8 / 15.1 / 14.2 (no gain). Further ahead (4-8 KB, into L1 or
// L2) was slower again.
constexpr size_t kLaneStreamAheadBytes = 1024;

// A Format's optional kStreamAheadBytes overrides kLaneStreamAheadBytes for its streams.
template <class F>
constexpr size_t LaneStreamAheadBytes() {
  if constexpr (requires { F::kStreamAheadBytes; }) {
    return F::kStreamAheadBytes;
  } else {
    return kLaneStreamAheadBytes;
  }
}

// Blocks per fetch of each stream: one fetch per 64 bytes at most, so every line is fetched.
template <class WBlock>
constexpr size_t kBlocksPerStreamFetch = sizeof(WBlock) >= 64 ? 1 : 64 / sizeof(WBlock);

// Fetches block b's lines of each of kRows rows kAheadBytes ahead (past a row's end this is the
// stream's next row, the next one it reads).
template <size_t kAheadBytes, size_t kRows = kLaneRows, size_t kBlocks = 1, class WBlock>
HWY_INLINE void FetchLaneStreamsAhead(const WBlock* const* HWY_RESTRICT rows, size_t b) {
  for (size_t l = 0; l < kRows; ++l) {
    const uint8_t* ahead = reinterpret_cast<const uint8_t*>(rows[l] + b) + kAheadBytes;
    // Written out: GCC drops a prefetch-only lambda (docs/PERFORMANCE.md).
    for (size_t o = 0; o < kBlocks * sizeof(WBlock); o += 64) hwy::Prefetch(ahead + o);
  }
}

// Rows [row_begin, row_end) in groups of kRows rows `step` apart, so that each of a group's
// streams reads rows one after another: body(row_of, n_rows) per group, row_of(l) its row l.
// Group i < step takes rows row_begin + i + l * step; the last, partial one the rows left over
// (its missing lanes repeat its last row and are not stored: n_rows says how many are real).
template <size_t kRows, class Body>
HWY_INLINE void ForEachSpreadGroup(size_t row_begin, size_t row_end, const Body& body) {
  const size_t step = (row_end - row_begin) / kRows;
  const size_t tail_begin = row_begin + kRows * step;
  const size_t n_groups = step + (tail_begin < row_end ? 1 : 0);
  for (size_t i = 0; i < n_groups; ++i) {
    const bool tail = i == step;
    const size_t n_rows = tail ? row_end - tail_begin : kRows;
    body(
        [&](size_t l) {
          return tail ? tail_begin + std::min(l, n_rows - 1) : row_begin + i + l * step;
        },
        n_rows);
  }
}

// Single tokens and short batches (up to kShortLaneTokens): groups of kLaneRows rows `step`
// apart, so each lane reads a long sequential stream (the hardware prefetcher follows those at
// full bandwidth), packed in registers and used there by all T tokens. A short batch (a
// speculative verification, a draft model's catch-up, a server step of a few sequences) is bound
// by one read of the weights like a single token; through LaneMatMat's per-chunk packing into a
// scratch, 2 tokens had cost 1.5-1.9 single-token passes. Dot<T> gives each token the bits
// Dot<1> gives it alone (batch invariance).
// Flattened: every Pack, Dot and lambda they call is inlined into the block loop. GCC otherwise
// weighs inlining a format's Pack lambdas against all the instantiations in the TU, and with the
// short-batch ones it called Q6_K's out of line (tinyllama Q6_K decode 0.7x).
template <class F, size_t T, bool kDotQuads = kHasDotQuads>
HWY_NOINLINE HWY_FLATTEN void LaneMatVec(const uint8_t* w, size_t w_row_bytes, size_t n_blocks,
                                         const typename F::XBlock* const* x,
                                         const typename F::Terms* const* terms, const float* bias,
                                         float* out, size_t out_stride, size_t row_begin,
                                         size_t row_end) {
  using WBlock = typename F::WBlock;
  ForEachSpreadGroup<kLaneRows>(row_begin, row_end, [&](const auto& row_of, size_t n_lanes) {
    const WBlock* rows[kLaneRows];
    for (size_t l = 0; l < kLaneRows; ++l) {
      rows[l] = reinterpret_cast<const WBlock*>(w + row_of(l) * w_row_bytes);
    }
    const LaneRowOffsets offsets = RowOffsets(rows);
    hn::Vec<LDF> acc[T];
    for (size_t k = 0; k < T; ++k) acc[k] = hn::Zero(LDF());
    for (size_t b0 = 0; b0 < n_blocks; b0 += kBlocksPerStreamFetch<WBlock>) {
      FetchLaneStreamsAhead<LaneStreamAheadBytes<F>()>(rows, b0);
      const size_t b1 = std::min(n_blocks, b0 + kBlocksPerStreamFetch<WBlock>);
      for (size_t b = b0; b < b1; ++b) {
        if constexpr (T == 1 && requires { &F::template PackDot<kDotQuads>; }) {
          F::template PackDot<kDotQuads>(rows, offsets, x, terms, b, acc);
        } else {
          typename F::Packed packed;
          F::Pack(rows, offsets, b, packed);
          F::template Dot<T, kDotQuads>(packed, x, terms, b, acc);
        }
      }
    }
    for (size_t k = 0; k < T; ++k) {
      StoreLaneRows(acc[k], n_lanes, row_of, bias, out + k * out_stride);
    }
  });
}

#if PETREL_QUANT_SIMD && HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
// A single token on paired groups of kPairRows rows `step` apart (LaneMatVec's spread streams),
// PairedBlocks<F>() blocks per PairedDot; a last block left over takes PairedDot<true>.
template <class F>
HWY_NOINLINE HWY_FLATTEN void PairedLaneMatVec(const uint8_t* w, size_t w_row_bytes,
                                               size_t n_blocks,
                                               const typename F::PairTerms* HWY_RESTRICT terms,
                                               const float* bias, float* out, size_t row_begin,
                                               size_t row_end) {
  using WBlock = typename F::WBlock;
  constexpr size_t kStep = PairedBlocks<F>();
  const size_t n_whole = n_blocks / kStep * kStep;
  ForEachSpreadGroup<kPairRows>(row_begin, row_end, [&](const auto& row_of, size_t n_rows) {
    const WBlock* rows[kPairRows];
    for (size_t l = 0; l < kPairRows; ++l) {
      rows[l] = reinterpret_cast<const WBlock*>(w + row_of(l) * w_row_bytes);
    }
    // Block b of each row, as bytes.
    const uint8_t* base[kPairRows];
    auto bases = [&](size_t b) {
      for (size_t l = 0; l < kPairRows; ++l) {
        base[l] = reinterpret_cast<const uint8_t*>(rows[l] + b);
      }
    };
    auto acc = hn::Zero(PDF());
    size_t b = 0;
    for (; b < n_whole; b += kStep) {
      FetchLaneStreamsAhead<LaneStreamAheadBytes<F>(), kPairRows, kStep>(rows, b);
      bases(b);
      acc = F::template PairedDot<false>(base, terms[b / kStep], acc);
    }
    if (b < n_blocks) {
      bases(b);
      acc = F::template PairedDot<true>(base, terms[b / kStep], acc);
    }
    StoreLaneRows(acc, n_rows, row_of, bias, out);
  });
}

// The mat_mul of a single token through PairedLaneMatVec.
template <class F>
HWY_INLINE void PairedLaneMatVecImpl(const uint8_t* w, size_t w_row_bytes, size_t n_blocks,
                                     const typename F::XBlock* x, const float* bias, float* out,
                                     size_t row_begin, size_t row_end) {
  constexpr size_t kStep = PairedBlocks<F>();
  const size_t n_steps = (n_blocks + kStep - 1) / kStep;
  thread_local Scratch<typename F::PairTerms> terms_storage;
  typename F::PairTerms* terms = GrowScratch(terms_storage, n_steps);
  for (size_t i = 0; i < n_steps; ++i) {
    F::ComputePairTerms(x + i * kStep, std::min(kStep, n_blocks - i * kStep), terms[i]);
  }
  PairedLaneMatVec<F>(w, w_row_bytes, n_blocks, terms, bias, out, row_begin, row_end);
}

#endif

// The most tokens LaneMatVec takes; longer batches pack each row group once per token chunk
// (LaneMatMat), whose tiles reuse it from L1.
constexpr size_t kShortLaneTokens = 4;

// A byte range (the next row group's weights) prefetched a few cache lines per token tile, so
// that it arrives while the current group's tiles run. A group's kLaneRows rows are short (432
// bytes per Q4_0 row of 768) and read one after another by Pack, too briefly for the hardware
// prefetcher to ramp up on: without this, packing each group waited on memory.
class SpreadPrefetch {
 public:
  // From the cache line that holds `begin`, so that the line holding `end - 1` is reached too.
  SpreadPrefetch(const uint8_t* begin, const uint8_t* end, size_t steps)
      : next_(begin - (reinterpret_cast<uintptr_t>(begin) & 63)),
        end_(end),
        per_step_((size_t(end - next_) + 63) / 64 / std::max<size_t>(steps, 1) * 64 + 64) {}
  // One step's share of the range.
  HWY_INLINE void Step() { Advance(per_step_); }
  // Whatever is left.
  HWY_INLINE void Finish() { Advance(size_t(end_ - next_)); }

 private:
  HWY_INLINE void Advance(size_t bytes) {
    if (next_ >= end_) return;  // done (the last line may have stepped past `end_`)
    const uint8_t* stop = next_ + std::min(bytes, size_t(end_ - next_));
    // Written out: GCC drops a prefetch-only lambda (docs/PERFORMANCE.md).
    for (; next_ < stop; next_ += 64) hwy::Prefetch(next_);
  }

  const uint8_t* next_;
  const uint8_t* end_;
  size_t per_step_;
};

// Tokens [t_begin, t_end) (a chunk starting at t_first) against one packed group, in tiles of
// T; returns the first token not done. Each tile issues one step of `prefetch`.
template <class F, size_t T>
HWY_INLINE size_t LaneTiles(const typename F::Packed* HWY_RESTRICT packed, size_t n_blocks,
                            const uint8_t* xq, size_t xq_row_bytes, const typename F::Terms* terms,
                            size_t t_begin, size_t t_end, size_t t_first, size_t row,
                            size_t n_lanes, const float* bias, float* out, size_t out_stride,
                            SpreadPrefetch& prefetch) {
  using XBlock = typename F::XBlock;
  using Terms = typename F::Terms;
  size_t t = t_begin;
  for (; t + T <= t_end; t += T) {
    prefetch.Step();
    const XBlock* x[T];
    const Terms* tt[T];
    hn::Vec<LDF> acc[T];
    for (size_t k = 0; k < T; ++k) {
      x[k] = reinterpret_cast<const XBlock*>(xq + (t + k) * xq_row_bytes);
      tt[k] = terms + (t + k - t_first) * n_blocks;
      acc[k] = hn::Zero(LDF());
    }
    for (size_t b = 0; b < n_blocks; ++b) F::template Dot<T>(packed[b], x, tt, b, acc);
    for (size_t k = 0; k < T; ++k) {
      StoreLaneRows(
          acc[k], n_lanes, [&](size_t l) { return row + l; }, bias, out + (t + k) * out_stride);
    }
  }
  return t;
}

// Several tokens: each group of kLaneRows consecutive rows is packed once per chunk of tokens
// into an L1 scratch and then used by every tile of the chunk.
template <class F>
HWY_NOINLINE void LaneMatMat(const uint8_t* w, size_t w_row_bytes, size_t n_blocks,
                             const uint8_t* xq, size_t xq_row_bytes, size_t n_tokens,
                             const float* bias, float* out, size_t out_stride, size_t row_begin,
                             size_t row_end) {
  using WBlock = typename F::WBlock;
  using XBlock = typename F::XBlock;
  constexpr size_t kTokenChunk = 64;  // whose activations stay in L2 while the groups pass
  thread_local Scratch<typename F::Packed> packed_storage;
  thread_local Scratch<typename F::Terms> terms_storage;
  typename F::Packed* packed = GrowScratch(packed_storage, n_blocks);
  typename F::Terms* terms = GrowScratch(terms_storage, kTokenChunk * n_blocks);
  const uint8_t* const rows_end = w + row_end * w_row_bytes;
  for (size_t t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
    const size_t t1 = std::min(n_tokens, t0 + kTokenChunk);
    const size_t n_tiles = (t1 - t0 + kLaneTileTokens - 1) / kLaneTileTokens;
    // The first group's rows, fetched while the chunk's activation terms are computed.
    SpreadPrefetch(w + row_begin * w_row_bytes,
                   std::min(rows_end, w + (row_begin + kLaneRows) * w_row_bytes), 1)
        .Finish();
    for (size_t t = t0; t < t1; ++t) {
      const auto* x = reinterpret_cast<const XBlock*>(xq + t * xq_row_bytes);
      for (size_t b = 0; b < n_blocks; ++b) F::ComputeTerms(x[b], terms[(t - t0) * n_blocks + b]);
    }
    for (size_t row = row_begin; row < row_end; row += kLaneRows) {
      const size_t n_lanes = std::min(kLaneRows, row_end - row);
      const WBlock* rows[kLaneRows];
      for (size_t l = 0; l < kLaneRows; ++l) {
        rows[l] =
            reinterpret_cast<const WBlock*>(w + (row + std::min(l, n_lanes - 1)) * w_row_bytes);
      }
      const LaneRowOffsets offsets = RowOffsets(rows);
      for (size_t b = 0; b < n_blocks; ++b) F::Pack(rows, offsets, b, packed[b]);
      // The next group's rows, spread over this group's tiles (in every chunk: a thread's rows
      // of a large matrix, tinyllama's gate and up, outgrow L2 between chunks).
      const uint8_t* next_group = std::min(rows_end, w + (row + kLaneRows) * w_row_bytes);
      SpreadPrefetch prefetch(next_group, std::min(rows_end, next_group + kLaneRows * w_row_bytes),
                              n_tiles);
      const size_t t =
          LaneTiles<F, kLaneTileTokens>(packed, n_blocks, xq, xq_row_bytes, terms, t0, t1, t0, row,
                                        n_lanes, bias, out, out_stride, prefetch);
      // The 1-3 tokens left in one narrower tile, so each packed block is read once for all of
      // them: short batches (2, 3, 6, 7 tokens...) had taken one single-token tile per token
      // (callgrind, small Q4_0, 2 tokens: 1.88 single-token passes).
      static_assert(kLaneTileTokens == 4, "one narrower tile per leftover count below");
      switch (t1 - t) {
        case 3:
          LaneTiles<F, 3>(packed, n_blocks, xq, xq_row_bytes, terms, t, t1, t0, row, n_lanes, bias,
                          out, out_stride, prefetch);
          break;
        case 2:
          LaneTiles<F, 2>(packed, n_blocks, xq, xq_row_bytes, terms, t, t1, t0, row, n_lanes, bias,
                          out, out_stride, prefetch);
          break;
        case 1:
          LaneTiles<F, 1>(packed, n_blocks, xq, xq_row_bytes, terms, t, t1, t0, row, n_lanes, bias,
                          out, out_stride, prefetch);
          break;
        default:
          break;
      }
      prefetch.Finish();
    }
  }
}
#endif  // PETREL_QUANT_SIMD

// The HostKernels::mat_mul_quantized contract for a rows-in-lanes Format.
// kDotQuads: the single-token code's dot step (see DotQuads); tokens in batches keep the
// target's own.
#if PETREL_QUANT_SIMD
template <class F, bool kDotQuads = kHasDotQuads>
#else
template <class F, bool kDotQuads = false>
#endif
HWY_INLINE void LaneMatMulImpl(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                               size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                               size_t out_stride, size_t row_begin, size_t row_end) {
  static_assert(FindMatMulKernel(F::kType)->driver == MatMulDriver::kRowsInLanes,
                "kMatMulKernels names another driver for this format");
#if !PETREL_QUANT_SIMD
  MatMulQuantScalar<F>(w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride,
                       row_begin, row_end);
#else
  static_assert(ActivationBlockType<typename F::XBlock>() == MatMulActivationType(F::kType),
                "the Format's activation blocks are not those kMatMulKernels names");
  if (row_begin >= row_end || n_tokens == 0) return;
  const uint8_t* w_bytes = static_cast<const uint8_t*>(w);
  const size_t n_blocks = n_in / F::kElems;
#if PETREL_QUANT_SIMD && HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
  if constexpr (kHasPairedDot<F>) {
    if (n_tokens == 1) {
      return PairedLaneMatVecImpl<F>(w_bytes, w_row_bytes, n_blocks,
                                     static_cast<const typename F::XBlock*>(xq), bias, out,
                                     row_begin, row_end);
    }
  }
#endif
  if (n_tokens <= kShortLaneTokens) {
    thread_local Scratch<typename F::Terms> terms_storage;
    typename F::Terms* terms = GrowScratch(terms_storage, n_tokens * n_blocks);
    const typename F::XBlock* x[kShortLaneTokens];
    const typename F::Terms* tt[kShortLaneTokens];
    for (size_t t = 0; t < n_tokens; ++t) {
      x[t] = reinterpret_cast<const typename F::XBlock*>(static_cast<const uint8_t*>(xq) +
                                                         t * xq_row_bytes);
      tt[t] = terms + t * n_blocks;
      for (size_t b = 0; b < n_blocks; ++b) F::ComputeTerms(x[t][b], terms[t * n_blocks + b]);
    }
    // Single tokens take kDotQuads (the hop's dot step); batches keep the target's own.
    static_assert(kShortLaneTokens == 4, "one LaneMatVec per count below");
    switch (n_tokens) {
      case 1:
        return LaneMatVec<F, 1, kDotQuads>(w_bytes, w_row_bytes, n_blocks, x, tt, bias, out,
                                           out_stride, row_begin, row_end);
      case 2:
        return LaneMatVec<F, 2>(w_bytes, w_row_bytes, n_blocks, x, tt, bias, out, out_stride,
                                row_begin, row_end);
      case 3:
        return LaneMatVec<F, 3>(w_bytes, w_row_bytes, n_blocks, x, tt, bias, out, out_stride,
                                row_begin, row_end);
      default:
        return LaneMatVec<F, 4>(w_bytes, w_row_bytes, n_blocks, x, tt, bias, out, out_stride,
                                row_begin, row_end);
    }
  }
  LaneMatMat<F>(w_bytes, w_row_bytes, n_blocks, static_cast<const uint8_t*>(xq), xq_row_bytes,
                n_tokens, bias, out, out_stride, row_begin, row_end);
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
