// Single tokens on 512-bit vectors with 8 row streams: each row's block split over a pair of
// lanes. Lane 2l + h holds half h of row l's block (a 256-element block's 128-element halves,
// a Q8_0 block's 16-byte halves), or block b + h of row l (Q4_0, two blocks per step), so a
// vector covers 8 rows, as the 256-bit code's do, with twice the elements per instruction. The
// 512-bit shape's 16 rows per group computed 1.6-1.8x faster than the 256-bit code from L2 on
// Q5_K and Q6_K but read slower from memory (16 row streams per thread against 8); this keeps
// the 8 streams and the width.
//
// The halves' exact int32 dots are added (SumLanePairs) before the block's float step, which is
// the rows-in-lanes one (convert, times d x the activation scale, fma in block order; two blocks
// per step take theirs in order, even lanes then odd): the results are bit for bit those of
// LaneMatVec and LaneMatMat.
//
// A Format opts in by providing PairTerms, ComputePairTerms(x_blocks, n_blocks, pair_terms) (a
// step's activations in lane-pair order: what lanes 2l and 2l + 1 multiply, side by side, so
// that one 64-bit broadcast feeds both) and PairedDot<kLast>(base, pair_terms, acc): acc (8
// float lanes, one per row) += the step's contribution, from the blocks at base[l] on (kLast: a
// last block alone, where a step is kPairedBlocks = 2 blocks). Only AVX3_DL (512-bit vectors
// and vpdpbusd) runs it; the driver is PairedLaneMatVec (quant_lanes_driver-inl.h), this file
// its helpers.

#if defined(PETREL_CPU_QUANT_LANES_PAIRED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PETREL_CPU_QUANT_LANES_PAIRED_INL_H_
#undef PETREL_CPU_QUANT_LANES_PAIRED_INL_H_
#else
#define PETREL_CPU_QUANT_LANES_PAIRED_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/matmul/quant_lanes-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {

#if PETREL_QUANT_SIMD && HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
// Rows per paired group, and the 8-lane vectors of its float step and results.
constexpr size_t kPairRows = kLaneRows / 2;
using PDF = hn::Full256<float>;
using PDI32 = hn::Full256<int32_t>;

// Whether F provides the paired single-token step.
template <class F>
constexpr bool kHasPairedDot = requires { typename F::PairTerms; };

// Blocks per paired step: 1 (a 256-element block, lane 2l + h holding its half h), or a Format's
// kPairedBlocks, 2 for the 32-element formats (lane 2l + h holding block b + h of row l).
template <class F>
constexpr size_t PairedBlocks() {
  if constexpr (requires { F::kPairedBlocks; }) {
    return F::kPairedBlocks;
  } else {
    return 1;
  }
}

// The 16 bytes at off0 (lane 2l) and off1 (lane 2l + 1) of each row's block at base[l],
// transposed: lane 2l + h of words[i] = bytes off_h + 4i..off_h + 4i + 3 of row l's block.
HWY_INLINE void TransposeHalves(const uint8_t* const* HWY_RESTRICT base, size_t off0, size_t off1,
                                QVU8Full (&words)[4]) {
  const uint8_t* src[kLaneRows];
  for (size_t l = 0; l < kPairRows; ++l) {
    src[2 * l] = base[l] + off0;
    src[2 * l + 1] = base[l] + off1;
  }
  TransposeWords(src, words);
}

// Lanes 2l + 1: the second halves.
HWY_INLINE hn::Mask<LDI32> OddLanes() { return hn::Mask<LDI32>{__mmask16{0xAAAA}}; }

// A 256-element block's activations in lane-pair order: quad pair i (8 bytes at 8i) is elements
// 4i..4i + 3 and 128 + 4i..128 + 4i + 3, what lanes 2l and 2l + 1 multiply.
HWY_INLINE void InterleaveHalves(const int8_t* HWY_RESTRICT qs, int8_t* HWY_RESTRICT pairs) {
  for (size_t i = 0; i < 32; ++i) {
    std::memcpy(pairs + 8 * i, qs + 4 * i, 4);
    std::memcpy(pairs + 8 * i + 4, qs + 128 + 4 * i, 4);
  }
}

// The 8 bytes at p, 4 for lane 2l and 4 for lane 2l + 1, in every lane pair.
HWY_INLINE hn::Vec<LDI8> BroadcastQuadPair(const int8_t* HWY_RESTRICT p) {
  uint64_t word;
  std::memcpy(&word, p, sizeof(word));
  return hn::BitCast(LDI8(), hn::Set(LDU64(), word));
}

// The two int32 values at p, for lanes 2l and 2l + 1.
HWY_INLINE hn::Vec<LDI32> BroadcastPair(const int32_t* HWY_RESTRICT p) {
  return hn::BitCast(LDI32(), BroadcastQuadPair(reinterpret_cast<const int8_t*>(p)));
}

// Row l's sum: lanes 2l and 2l + 1 added (mod 2^32, the exact int32 sum), as 8 lanes.
HWY_INLINE hn::Vec<PDI32> SumLanePairs(hn::Vec<LDI32> v) {
  const auto pairs = hn::BitCast(LDU64(), v);
  const auto sums = hn::Add(pairs, hn::ShiftRight<32>(pairs));  // low words: lo + hi
  return hn::Vec<PDI32>{_mm512_cvtepi64_epi32(sums.raw)};
}

// The even lanes (lane 2l: row l's), as 8 lanes.
HWY_INLINE hn::Vec<hn::Full256<uint32_t>> EvenLanes(hn::Vec<LDU32> v) {
  return hn::Vec<hn::Full256<uint32_t>>{_mm512_cvtepi64_epi32(hn::BitCast(LDU64(), v).raw)};
}

// The f16 at base[l] + offset of each row l, as 8 f32 lanes: inserted, not gathered (Zen 5's
// vpgatherdd made Q4_0's two-block step slower than the 256-bit code).
HWY_INLINE hn::Vec<PDF> RowHalvesToF32(const uint8_t* const* HWY_RESTRICT base, size_t offset) {
  return hn::Vec<PDF>{InsertHalvesToF32([&](size_t l) { return base[l] + offset; })};
}

// The even and the odd lanes, as 8 lanes each.
HWY_INLINE hn::Vec<PDF> EvenLanesF(hn::Vec<LDF> v) {
  return hn::BitCast(PDF(), EvenLanes(hn::BitCast(LDU32(), v)));
}
HWY_INLINE hn::Vec<PDF> OddLanesF(hn::Vec<LDF> v) {
  return hn::BitCast(PDF(), EvenLanes(hn::BitCast(
                                LDU32(), hn::ShiftRight<32>(hn::BitCast(LDU64(), v)))));
}

// The f16 in the upper half of each odd lane (lane 2l + 1: row l's), as 8 f32 lanes.
HWY_INLINE hn::Vec<PDF> OddUpperHalvesToF32(QVU8Full words) {
  const auto high = hn::ShiftRight<48>(hn::BitCast(LDU64(), words));
  return hn::Vec<PDF>{_mm256_cvtph_ps(_mm512_cvtepi64_epi16(high.raw))};
}

// A two-block step's activations for a 32-element format against Q8_0 (lane 2l + h: block b + h
// of row l) whose levels are made unsigned for vpdpbusd by adding kOffset: quad pair s (8 bytes
// at 8s) is elements 4s..4s + 3 of block b, then of block b + 1; offset_sum[h] = -kOffset x the
// sum of block b + h's activations, which takes the offset back out of the exact integer dot.
struct OffsetPairTerms {
  int8_t qs[64];
  int32_t offset_sum[2];
  float d[2];
};

// A last block alone (n_blocks 1) stands in for its missing second (PairedDot<true> drops it).
template <int kOffset>
HWY_INLINE void ComputeOffsetPairTerms(const quant::BlockQ8_0* x, size_t n_blocks,
                                       OffsetPairTerms& terms) {
  const quant::BlockQ8_0& second = x[n_blocks - 1];
  for (size_t s = 0; s < 8; ++s) {
    std::memcpy(terms.qs + 8 * s, x[0].qs + 4 * s, 4);
    std::memcpy(terms.qs + 8 * s + 4, second.qs + 4 * s, 4);
  }
  terms.offset_sum[0] = -kOffset * ActivationSum(x[0]);
  terms.offset_sum[1] = -kOffset * ActivationSum(second);
  terms.d[0] = HalfToF32(x[0].d);
  terms.d[1] = HalfToF32(second.d);
}

// The exact int32 dots (lane 2l + h: block b + h of row l) of a step of a 32-element format whose
// 16 nibble bytes at kQsOffset hold Q4_0's order (byte i: element i low, element i + 16 high)
// of indices into a 16-entry grid of levels; grid16 holds them + kOffset (unsigned, for
// vpdpbusd). Blocks are kBlockBytes apart; kLast: the second is the first again.
template <bool kLast, size_t kBlockBytes, size_t kQsOffset>
HWY_INLINE hn::Vec<LDI32> PairedGridNibbleSums(const uint8_t* const* HWY_RESTRICT base,
                                               const OffsetPairTerms& xt,
                                               const uint8_t* HWY_RESTRICT grid16) {
  const LDU8 du8;
  const hn::Repartition<uint16_t, LDU8> du16;
  constexpr size_t kSecond = kLast ? 0 : kBlockBytes;
  QVU8Full q[4];
  TransposeHalves(base, kQsOffset, kSecond + kQsOffset, q);
  const auto grid = hn::LoadDup128(du8, grid16);
  const auto mask = hn::Set(du8, 0x0F);
  // Two chains (low and high nibbles), so that the sums do not wait on one 8-deep chain.
  auto isum = BroadcastPair(xt.offset_sum), high_sum = hn::Zero(LDI32());
  for (size_t s = 0; s < 4; ++s) {
    const auto lo = hn::TableLookupBytes(grid, hn::And(q[s], mask));
    const auto hi = hn::TableLookupBytes(
        grid, hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, q[s]))), mask));
    isum = DotQuads<true>(isum, lo, BroadcastQuadPair(xt.qs + 8 * s));
    high_sum = DotQuads<true>(high_sum, hi, BroadcastQuadPair(xt.qs + 8 * s + 32));
  }
  return hn::Add(isum, high_sum);
}

// The float step of a two-block step, as the rows-in-lanes Dot takes it block by block: acc +=
// float(block b's sums) x (its weight scales x its activation scale), then block b + 1's (kLast:
// none). isum: the exact dots in lanes 2l + h; weight_scales(h): block b + h's scales of the 8
// rows.
template <bool kLast, class WeightScales>
HWY_INLINE hn::Vec<PDF> PairedFloatStep(hn::Vec<LDI32> isum, const float (&dx)[2],
                                        const WeightScales& weight_scales, hn::Vec<PDF> acc) {
  const auto sums = hn::ConvertTo(LDF(), isum);
  acc = hn::MulAdd(EvenLanesF(sums), hn::Mul(weight_scales(0), hn::Set(PDF(), dx[0])), acc);
  if constexpr (!kLast) {
    acc = hn::MulAdd(OddLanesF(sums), hn::Mul(weight_scales(1), hn::Set(PDF(), dx[1])), acc);
  }
  return acc;
}

// The paired single-token step of a 32-element format against Q8_0 whose levels are made
// unsigned by adding kOffset, two blocks per step, for a Format to derive from: Sub provides
// PairedSums<kLast>(base, terms) (the exact int32 dots, lane 2l + h: block b + h of row l) and
// PairedScales(base, offset) (the 8 rows' weight scales of the blocks at base[l] + offset).
template <class Sub, int kOffset>
struct OffsetPairedStep {
  static constexpr bool kSingleTokenFullWidth = true;
  static constexpr size_t kPairedBlocks = 2;
  using PairTerms = OffsetPairTerms;

  static HWY_INLINE void ComputePairTerms(const quant::BlockQ8_0* x, size_t n_blocks,
                                          PairTerms& terms) {
    ComputeOffsetPairTerms<kOffset>(x, n_blocks, terms);
  }

  // A single token against the two blocks at base[l] (kLast: one) of 8 rows: Dot<1>'s integers
  // in lanes 2l + h, then each block's float step in block order.
  template <bool kLast>
  static HWY_INLINE hn::Vec<PDF> PairedDot(const uint8_t* const* HWY_RESTRICT base,
                                           const PairTerms& xt, hn::Vec<PDF> acc) {
    constexpr size_t kSecond = kLast ? 0 : sizeof(typename Sub::WBlock);
    return PairedFloatStep<kLast>(
        Sub::template PairedSums<kLast>(base, xt), xt.d,
        [&](size_t h) { return Sub::PairedScales(base, h * kSecond); }, acc);
  }
};

#else
template <class F>
constexpr bool kHasPairedDot = false;
// Elsewhere a Format's paired step is nothing.
template <class Sub, int kOffset>
struct OffsetPairedStep {};
#endif

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
