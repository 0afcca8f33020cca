// The scale-and-min part of the Q4_K and Q5_K rows-in-lanes Formats (quant_lanes-inl.h): both
// super-blocks start with d, dmin and the same twelve bytes of 6-bit scales and mins, and take
// their mins through the Q8_K activations' sub-block sums, so only the quants differ.

#if defined(PETREL_CPU_QUANT_LANES_K4_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PETREL_CPU_QUANT_LANES_K4_INL_H_
#undef PETREL_CPU_QUANT_LANES_K4_INL_H_
#else
#define PETREL_CPU_QUANT_LANES_K4_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "cpu/matmul/quant_lanes-inl.h"
#include "cpu/matmul/quant_lanes_paired-inl.h"
#include "hwy/highway.h"
#include "quant/blocks.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {

#if PETREL_QUANT_SIMD
// Per (token, super-block) activation terms.
struct K4Terms {
  float d;
  // The activation sums of sub-blocks 2k and 2k + 1 as an int16 pair (|sum| <= 32 x 128).
  uint32_t sum_pairs[4];
};

HWY_INLINE void ComputeK4Terms(const quant::BlockQ8_K& x, K4Terms& terms) {
  terms.d = x.d;
  for (size_t k = 0; k < 4; ++k) {
    const int16_t lo = int16_t(x.bsums[4 * k] + x.bsums[4 * k + 1]);
    const int16_t hi = int16_t(x.bsums[4 * k + 2] + x.bsums[4 * k + 3]);
    terms.sum_pairs[k] = uint32_t(uint16_t(lo)) | uint32_t(uint16_t(hi)) << 16;
  }
}

// Block b's scales, mins, d and dmin of the kLaneRows rows, as lanes.
struct K4Scales {
  // Defined here, inside the target region: GCC compiles the implicit constructor of a
  // struct of vectors without the target's options, and then cannot inline the vectors'
  // constructors into it on AArch64 NEON ("target specific option mismatch").
  HWY_INLINE K4Scales() {}
  hn::Vec<LDI16> scales[8];  // sub-block k: each row's scale in both halves of its lane
  hn::Vec<LDI16> mins[4];    // sub-blocks 2k, 2k + 1: each row's two mins
  hn::Vec<LDF> d, dmin;
};

// Sub-blocks 0..3 (lo) and 4..7 (hi)'s 6-bit scales and mins, a byte each in every 32-bit lane,
// from the transposed block heads (heads[1..3]: the twelve bytes of scales and mins).
struct K4ScaleBytes {
  hn::Vec<LDU32> scales_lo, mins_lo, scales_hi, mins_hi;
};

HWY_INLINE K4ScaleBytes DecodeK4ScaleBytes(const QVU8Full (&heads)[4]) {
  const LDU32 du32;
  const auto w0 = hn::BitCast(du32, heads[1]), w1 = hn::BitCast(du32, heads[2]);
  const auto w2 = hn::BitCast(du32, heads[3]);
  const auto low6 = hn::Set(du32, 0x3F3F3F3Fu), low4 = hn::Set(du32, 0x0F0F0F0Fu);
  const auto bits45 = hn::Set(du32, 0x30303030u);
  return {hn::And(w0, low6), hn::And(w1, low6),
          hn::Or(hn::And(w2, low4), hn::And(hn::ShiftRight<2>(w0), bits45)),
          hn::Or(hn::And(hn::ShiftRight<4>(w2), low4), hn::And(hn::ShiftRight<2>(w1), bits45))};
}

// The 6-bit scales and mins as ggml's get_scale_min_k4 lays them out, four per 32-bit lane:
// sub-blocks 0..3 in the low six bits of bytes 0..3 (scales) and 4..7 (mins); 4..7 from the
// nibbles of bytes 8..11 with two high bits from the tops of bytes 0..7. The block heads of all
// rows, transposed once (TransposeBlockBytes), decode into int16 pair lanes.
template <class WBlock>
HWY_INLINE void PackK4Scales(const WBlock* const* HWY_RESTRICT rows, size_t b, K4Scales& packed) {
  static_assert(offsetof(WBlock, d) == 0 && offsetof(WBlock, dmin) == 2, "d, dmin start the block");
  const LDU32 du32;
  QVU8Full heads[4];  // d and dmin, then the three words of scales and mins
  TransposeBlockBytes(rows, b, 0, heads);
  const LDU8 du8;
  const LDI16 d16;
  const K4ScaleBytes bytes = DecodeK4ScaleBytes(heads);
  const auto scales_lo = hn::BitCast(du8, bytes.scales_lo);
  const auto mins_lo = hn::BitCast(du8, bytes.mins_lo);
  const auto scales_hi = hn::BitCast(du8, bytes.scales_hi);
  const auto mins_hi = hn::BitCast(du8, bytes.mins_hi);
  auto pairs = [&](QVU8Full bytes, QVU8Full index) {
    return hn::BitCast(d16, hn::TableLookupBytesOr0(bytes, index));
  };
  Unroll<4>([&](auto k_constant) HWY_ATTR {
    constexpr int k = decltype(k_constant)::value;
    packed.scales[k] = pairs(scales_lo, PairIndex<k, k>());
    packed.scales[k + 4] = pairs(scales_hi, PairIndex<k, k>());
  });
  packed.mins[0] = pairs(mins_lo, PairIndex<0, 1>());
  packed.mins[1] = pairs(mins_lo, PairIndex<2, 3>());
  packed.mins[2] = pairs(mins_hi, PairIndex<0, 1>());
  packed.mins[3] = pairs(mins_hi, PairIndex<2, 3>());
  const auto d_words = hn::BitCast(du32, heads[0]);
  packed.d = HalvesToF32<false>(d_words);
  packed.dmin = HalvesToF32<true>(d_words);
}

// acc[t] += the block's contribution, from isum[t] (lanes = rows: sum over sub-blocks of scale
// times the integer dot): d d_x isum - dmin d_x sum(min x sub-block sum), each an exact int32
// sum converted once.
template <size_t T>
HWY_INLINE void AccumulateK4(const K4Scales& packed, const K4Terms* const* HWY_RESTRICT terms,
                             size_t b, const hn::Vec<LDI32> (&isum)[T], hn::Vec<LDF> (&acc)[T]) {
  const LDU32 du32;
  const LDF df;
  for (size_t t = 0; t < T; ++t) {
    const K4Terms& xt = terms[t][b];
    hn::Vec<LDI32> min_sum;
    for (size_t k = 0; k < 4; ++k) {
      const auto sums = hn::BitCast(LDI16(), hn::Set(du32, xt.sum_pairs[k]));
      const auto m = MulPairsI16(packed.mins[k], sums);
      min_sum = k == 0 ? m : hn::Add(min_sum, m);
    }
    const auto dx = hn::Set(df, xt.d);
    acc[t] = hn::MulAdd(hn::ConvertTo(df, isum[t]), hn::Mul(packed.d, dx), acc[t]);
    acc[t] = hn::MulAdd(hn::ConvertTo(df, min_sum), hn::Neg(hn::Mul(packed.dmin, dx)), acc[t]);
  }
}

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
// A single token's K4Terms in lane-pair order (quant_lanes_paired-inl.h): lane 2l + h takes half
// h of each super-block, sub-blocks 4h..4h + 3.
struct K4PairTerms {
  int8_t qs[256];            // InterleaveHalves
  uint32_t sum_pairs[4];     // K4Terms' pairs 0, 2 (as lanes 2l, 2l + 1), then 1, 3
  float d;
};

// The paired lanes' terms of Q4_K and Q5_K (their Formats derive from it on AVX3_DL).
struct K4PairedTerms {
  using PairTerms = K4PairTerms;
  static HWY_INLINE void ComputePairTerms(const quant::BlockQ8_K* x, size_t /*n_blocks: 1*/,
                                          K4PairTerms& terms) {
    K4Terms plain;
    ComputeK4Terms(*x, plain);
    InterleaveHalves(x->qs, terms.qs);
    terms.sum_pairs[0] = plain.sum_pairs[0];
    terms.sum_pairs[1] = plain.sum_pairs[2];
    terms.sum_pairs[2] = plain.sum_pairs[1];
    terms.sum_pairs[3] = plain.sum_pairs[3];
    terms.d = plain.d;
  }
};

// Block b's scales and mins in lane-pair order, and each row's d and dmin.
struct PairedK4Scales {
  HWY_INLINE PairedK4Scales() {}
  hn::Vec<LDU32> scales;    // lane 2l + h: the scales of sub-blocks 4h..4h + 3, a byte each
  hn::Vec<LDI16> mins[2];   // lane 2l + h: the mins of sub-blocks 4h, 4h + 1, then 4h + 2, 4h + 3
  hn::Vec<PDF> d, dmin;
};

HWY_INLINE void PackPairedK4Scales(const uint8_t* const* HWY_RESTRICT base,
                                   PairedK4Scales& packed) {
  QVU8Full heads[4];
  TransposeHalves(base, 0, 0, heads);
  const K4ScaleBytes bytes = DecodeK4ScaleBytes(heads);
  packed.scales = hn::IfThenElse(hn::RebindMask(LDU32(), OddLanes()), bytes.scales_hi,
                                 bytes.scales_lo);
  const auto mins = hn::BitCast(
      LDU8(), hn::IfThenElse(hn::RebindMask(LDU32(), OddLanes()), bytes.mins_hi, bytes.mins_lo));
  packed.mins[0] = hn::BitCast(LDI16(), hn::TableLookupBytesOr0(mins, PairIndex<0, 1>()));
  packed.mins[1] = hn::BitCast(LDI16(), hn::TableLookupBytesOr0(mins, PairIndex<2, 3>()));
  const auto d_words = EvenLanes(hn::BitCast(LDU32(), heads[0]));
  const hn::Full256<hwy::float16_t> df16;
  packed.d = hn::PromoteTo(PDF(), hn::BitCast(hn::Half<decltype(df16)>(), TruncateTo16(d_words)));
  packed.dmin = hn::PromoteTo(
      PDF(), hn::BitCast(hn::Half<decltype(df16)>(), TruncateTo16(hn::ShiftRight<16>(d_words))));
}

// The local sub-block k's (0..3) scale of each lane, as int32.
template <size_t k>
HWY_INLINE hn::Vec<LDI32> PairedK4Scale(const PairedK4Scales& packed) {
  const auto byte = hn::And(hn::ShiftRight<8 * k>(packed.scales), hn::Set(LDU32(), 0xFF));
  return hn::BitCast(LDI32(), byte);
}

// AccumulateK4 for a single token on paired lanes: each row's halves added first.
HWY_INLINE hn::Vec<PDF> AccumulatePairedK4(const PairedK4Scales& packed, const K4PairTerms& xt,
                                           hn::Vec<LDI32> isum, hn::Vec<PDF> acc) {
  const auto* sum_pairs = reinterpret_cast<const int32_t*>(xt.sum_pairs);
  const auto sums01 = hn::BitCast(LDI16(), BroadcastPair(sum_pairs));
  const auto sums23 = hn::BitCast(LDI16(), BroadcastPair(sum_pairs + 2));
  const auto min_sum =
      hn::Add(MulPairsI16(packed.mins[0], sums01), MulPairsI16(packed.mins[1], sums23));
  const auto dx = hn::Set(PDF(), xt.d);
  acc = hn::MulAdd(hn::ConvertTo(PDF(), SumLanePairs(isum)), hn::Mul(packed.d, dx), acc);
  return hn::MulAdd(hn::ConvertTo(PDF(), SumLanePairs(min_sum)), hn::Neg(hn::Mul(packed.dmin, dx)),
                    acc);
}
#endif
#endif  // PETREL_QUANT_SIMD

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
