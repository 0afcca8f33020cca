// mat_mul for Q4_K weights: one Highway foreach_target TU over the rows-in-lanes driver
// (quant_lanes_driver-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// A super-block holds four 32-byte chunks; byte i of chunk j has element 64j + i in its low
// nibble (sub-block 2j) and 64j + 32 + i in its high one (sub-block 2j + 1), and each sub-block
// has a 6-bit scale and min. Packed, lane l of q[8j + s] holds bytes 4s..4s+3 of chunk j of row
// l; the scales and mins are decoded for all rows at once from the transposed block heads into
// int16 pair lanes (quant_lanes_k4-inl.h, shared with Q5_K). Per token and sub-block, the eight
// 16-bit pair sums are added before the scale's multiply-add (a pair is at most 2 x 15 x 128
// and a lane adds 8: 30720 < 32767); the mins multiply the sub-block sums of the activations
// (from Q8_K's bsums) in the same way, and the two int32 sums are scaled by d and -dmin times
// the activation scale.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_q4_k.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/matmul/matmul_entry.h"
#include "cpu/matmul/quant_lanes_driver-inl.h"
#include "cpu/matmul/quant_lanes_k4-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format
#if PETREL_QUANT_SIMD && HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
    : K4PairedTerms  // PairTerms, ComputePairTerms
#endif
{
  using WBlock = quant::BlockQ4_K;
  static constexpr DType kType = DType::kQ4_K;
  static constexpr size_t kElems = quant::kQK_K;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_K;
  // Single tokens on AVX3_DL stay there, on paired lanes (PairedDot) rather than hop to the AVX2
  // code: the 512-bit code measured faster for this format, and the paired lanes compute it
  // faster still from L2 on half the row streams. Were they to hop, the 256-bit vpdpbusd step
  // measured no faster than vpmaddubsw there (docs/PERFORMANCE.md).
  static constexpr bool kSingleTokenDotQuads = false;
  static constexpr bool kSingleTokenFullWidth = true;
  // Each row stream fetched 512 bytes ahead rather than the driver's 1 KB: with the scales no
  // longer gathered, one thread read faster from memory so (docs/PERFORMANCE.md).
  static constexpr size_t kStreamAheadBytes = 512;
  using Terms = K4Terms;
  struct Packed {
    // Defined here, inside the target region: GCC compiles the implicit constructor of a
    // struct of vectors without the target's options, and then cannot inline the vectors'
    // constructors into it on AArch64 NEON ("target specific option mismatch").
    HWY_INLINE Packed() {}
    QVU8Full q[32];
    K4Scales scales;
  };

  static HWY_INLINE void ComputeTerms(const XBlock& x, Terms& terms) { ComputeK4Terms(x, terms); }

  static HWY_INLINE void Pack(const WBlock* const* HWY_RESTRICT rows, const LaneRowOffsets& offsets,
                              size_t b, Packed& packed) {
    for (size_t j = 0; j < 4; ++j) {
      const uint8_t* src[kLaneRows];
      QVU8Full half[4];
      for (size_t h = 0; h < 2; ++h) {
        for (size_t l = 0; l < kLaneRows; ++l) src[l] = rows[l][b].qs + 32 * j + 16 * h;
        TransposeWords(src, half);
        for (size_t s = 0; s < 4; ++s) packed.q[8 * j + 4 * h + s] = half[s];
      }
    }
    PackK4Scales(rows, b, packed.scales);
  }

  // isum[t] (k == 0) or isum[t] + the scaled int32 dot of sub-block k (chunk k / 2, low or high
  // nibbles; q: the chunk's 8 packed vectors) with token t's activations.
  // k is a template parameter, so each sub-block's nibble half is chosen at compile time.
  template <size_t k, size_t T, bool kDotQuads>
  static HWY_INLINE void SubBlockDot(const QVU8Full* HWY_RESTRICT q, const K4Scales& scales,
                                     const XBlock* const* HWY_RESTRICT x, size_t b,
                                     hn::Vec<LDI32> (&isum)[T]) {
    const LDU8 du8;
    const hn::Repartition<uint16_t, LDU8> du16;
    const auto mask = hn::Set(du8, 0x0F);
    auto levels_of = [&](QVU8Full v) {
      return k % 2 == 0 ? hn::And(v, mask)
                        : hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, v))), mask);
    };
    if constexpr (kDotQuads) {
      // vpdpbusd: the sub-block's int32 dot in two chains, times the row's scale (the int16
      // pair's upper half; 0..63) as one int32 multiply: the same integers as below. High
      // nibbles are dotted in place (16 times the level) and the sum shifted down once, an
      // exact division (at most 16 x 15 x 128 x 32 in a lane), instead of each vector.
      const auto scale = hn::ShiftRight<16>(hn::BitCast(LDI32(), scales.scales[k]));
      const auto high_mask = hn::Set(du8, 0xF0);
      hn::Vec<LDI32> dot[T], dot_odd[T];
      for (size_t t = 0; t < T; ++t) dot[t] = dot_odd[t] = hn::Zero(LDI32());
      for (size_t s = 0; s < 8; ++s) {
        const auto levels = k % 2 == 0 ? hn::And(q[s], mask) : hn::And(q[s], high_mask);
        for (size_t t = 0; t < T; ++t) {
          const int8_t* xq = x[t][b].qs + 64 * (k / 2) + 32 * (k % 2) + 4 * s;
          auto& sum = s % 2 == 0 ? dot[t] : dot_odd[t];
          sum = DotQuads<kDotQuads>(sum, levels, BroadcastQuad(xq));
        }
      }
      for (size_t t = 0; t < T; ++t) {
        auto sub_dot = hn::Add(dot[t], dot_odd[t]);
        if (k % 2 == 1) sub_dot = hn::ShiftRight<4>(sub_dot);
        const auto scaled = hn::Mul(sub_dot, scale);
        isum[t] = k == 0 ? scaled : hn::Add(isum[t], scaled);
      }
      return;
    }
    hn::Vec<LDI16> sum16[T];
    for (size_t s = 0; s < 8; ++s) {
      const auto levels = levels_of(q[s]);
      for (size_t t = 0; t < T; ++t) {
        const int8_t* xq = x[t][b].qs + 64 * (k / 2) + 32 * (k % 2) + 4 * s;
        const auto prod = MulPairsU8I8(levels, BroadcastQuad(xq));
        sum16[t] = s == 0 ? prod : hn::Add(sum16[t], prod);
      }
    }
    for (size_t t = 0; t < T; ++t) {
      const auto scaled = MulPairsI16(sum16[t], scales.scales[k]);
      isum[t] = k == 0 ? scaled : hn::Add(isum[t], scaled);
    }
  }

  template <size_t T, bool kDotQuads = kHasDotQuads>
  static HWY_INLINE void Dot(const Packed& packed, const XBlock* const* HWY_RESTRICT x,
                             const Terms* const* HWY_RESTRICT terms, size_t b,
                             hn::Vec<LDF> (&acc)[T]) {
    hn::Vec<LDI32> isum[T];
    Unroll<8>([&](auto k_constant) HWY_ATTR {
      constexpr size_t k = decltype(k_constant)::value;
      SubBlockDot<k, T, kDotQuads>(packed.q + 8 * (k / 2), packed.scales, x, b, isum);
    });
    AccumulateK4<T>(packed.scales, terms, b, isum, acc);
  }

  // Pack then Dot<1> for a single token, a chunk at a time: the 32 packed vectors and the
  // scales do not fit in registers beside the dot's (they spilled on AVX-512).
  template <bool kDotQuads>
  static HWY_INLINE void PackDot(const WBlock* const* HWY_RESTRICT rows,
                                 const LaneRowOffsets& offsets, const XBlock* const* HWY_RESTRICT x,
                                 const Terms* const* HWY_RESTRICT terms, size_t b,
                                 hn::Vec<LDF> (&acc)[1]) {
    K4Scales scales;
    PackK4Scales(rows, b, scales);
    hn::Vec<LDI32> isum[1];
    Unroll<4>([&](auto j_constant) HWY_ATTR {
      constexpr size_t j = decltype(j_constant)::value;
      const uint8_t* src[kLaneRows];
      QVU8Full q[8];
      for (size_t h = 0; h < 2; ++h) {
        QVU8Full half[4];
        for (size_t l = 0; l < kLaneRows; ++l) src[l] = rows[l][b].qs + 32 * j + 16 * h;
        TransposeWords(src, half);
        for (size_t s = 0; s < 4; ++s) q[4 * h + s] = half[s];
      }
      SubBlockDot<2 * j, 1, kDotQuads>(q, scales, x, b, isum);
      SubBlockDot<2 * j + 1, 1, kDotQuads>(q, scales, x, b, isum);
    });
    AccumulateK4<1>(scales, terms, b, isum, acc);
  }

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
  // A single token against the block at base[l] of 8 rows, half h of row l (sub-blocks
  // 4h..4h + 3: chunks 2h, 2h + 1) in lane 2l + h: SubBlockDot's integers, high nibbles dotted in
  // place and shifted down once per sub-block.
  template <bool kLast>
  static HWY_INLINE hn::Vec<PDF> PairedDot(const uint8_t* const* HWY_RESTRICT base,
                                           const PairTerms& xt, hn::Vec<PDF> acc) {
    const LDI32 d32;
    const LDU8 du8;
    PairedK4Scales scales;
    PackPairedK4Scales(base, scales);
    auto isum = hn::Zero(d32);
    Unroll<2>([&](auto j_constant) HWY_ATTR {
      constexpr size_t j = decltype(j_constant)::value;  // chunk 2h + j of half h
      QVU8Full q[8];
      Unroll<2>([&](auto h_constant) HWY_ATTR {
        constexpr size_t h = decltype(h_constant)::value;  // its bytes 16h..16h + 15
        constexpr size_t kQs = offsetof(WBlock, qs) + 32 * j + 16 * h;
        QVU8Full half[4];
        TransposeHalves(base, kQs, kQs + 64, half);
        for (size_t s = 0; s < 4; ++s) q[4 * h + s] = half[s];
      });
      Unroll<2>([&](auto p_constant) HWY_ATTR {
        constexpr size_t p = decltype(p_constant)::value;  // low or high nibbles
        constexpr size_t k = 2 * j + p;                     // local sub-block
        const auto mask = hn::Set(du8, p == 0 ? 0x0F : 0xF0);
        const int8_t* xq = xt.qs + 8 * (8 * k);
        auto dot = hn::Zero(d32), dot_odd = hn::Zero(d32);
        for (size_t s = 0; s < 8; s += 2) {
          dot = DotQuads<true>(dot, hn::And(q[s], mask), BroadcastQuadPair(xq + 8 * s));
          dot_odd =
              DotQuads<true>(dot_odd, hn::And(q[s + 1], mask), BroadcastQuadPair(xq + 8 * s + 8));
        }
        auto sub_dot = hn::Add(dot, dot_odd);
        if constexpr (p == 1) sub_dot = hn::ShiftRight<4>(sub_dot);
        isum = hn::Add(isum, hn::Mul(sub_dot, PairedK4Scale<k>(scales)));
      });
    });
    return AccumulatePairedK4(scales, xt, isum, acc);
  }
#endif
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_LANES_MATMUL_TARGET(Q4_K)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(Q4_K)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
