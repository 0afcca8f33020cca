// mat_mul for Q6_K weights: one Highway foreach_target TU over the rows-in-lanes driver
// (quant_lanes_driver-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// Each 128-element half h of a super-block has 32-byte chunks A = ql[64h..], B = ql[64h + 32..]
// and H = qh[32h..]: byte i of them holds element 128h + 32r + i in the low nibble of A (r = 0)
// or B (1), or the high nibble of A (2) or B (3), with bits 2r, 2r + 1 of H on top; the level
// (0..63) is the value + 32, and each 16 elements have a signed 8-bit scale. Pack transposes the
// chunks (lane l of a vector: 4 bytes of row l) and puts the levels together there, once per
// row group and token chunk rather than per tile: q[s] holds elements 4s..4s + 3. A pair sum is
// at most 2 x 63 x 128, so a 16-bit lane adds two of them (32256 < 32767) before the sub-block
// scale's multiply-add widens it. The offset 32 goes through the activations' 16-element sums
// (Q8_K's bsums, negated once per token): 32 x the scales as int16 pairs times them start the
// int32 sum, which is exact, then converted and scaled by d times the activation scale.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_q6_k.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/matmul/matmul_entry.h"
#include "cpu/matmul/quant_lanes_driver-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format {
  using WBlock = quant::BlockQ6_K;
  static constexpr DType kType = DType::kQ6_K;
  static constexpr size_t kElems = quant::kQK_K;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_K;
  // Single tokens on AVX3_DL stay there, on paired lanes (PairedDot: 8 row streams per thread,
  // which read faster from a contended memory than the 512-bit code's 16, at full width); on
  // AVX3 they take the AVX2 code (PETREL_LANES_SINGLE_TOKEN_HOP, docs/PERFORMANCE.md).
  static constexpr bool kSingleTokenDotQuads = false;
  static constexpr bool kSingleTokenFullWidth = true;
  struct Terms {
    float d;
    uint32_t neg_sum_pairs[8];  // -bsums 2k and 2k + 1 as an int16 pair (|bsum| <= 16 x 128)
  };
  struct Packed {
    // Defined here, inside the target region: GCC compiles the implicit constructor of a
    // struct of vectors without the target's options, and then cannot inline the vectors'
    // constructors into it on AArch64 NEON ("target specific option mismatch").
    HWY_INLINE Packed() {}
    QVU8Full q[64];             // quad s: elements 4s..4s + 3, levels 0..63
    hn::Vec<LDI16> scales[16];  // sub-block i: each row's scale in both halves of its lane
    hn::Vec<LDI16> offsets[8];  // sub-blocks 2k, 2k + 1: each row's 32 x scale pair
    hn::Vec<LDF> d;
  };

  static HWY_INLINE void ComputeTerms(const XBlock& x, Terms& terms) {
    terms.d = x.d;
    for (size_t k = 0; k < 8; ++k) {
      terms.neg_sum_pairs[k] =
          uint32_t(uint16_t(-x.bsums[2 * k])) | uint32_t(uint16_t(-x.bsums[2 * k + 1])) << 16;
    }
  }

  // The levels of sub-block k = 8h + 2r + p (h: half, r: nibble chunk and bit pair, p: which 16
  // bytes) from transposed bytes of chunk A (r even) or B and of H. The 16-bit shifts carry bits
  // across bytes; the masks clear them.
  template <size_t r>
  static HWY_INLINE QVU8Full Level(QVU8Full chunk, QVU8Full high) {
    const LDU8 du8;
    const hn::Repartition<uint16_t, LDU8> du16;
    const auto c16 = hn::BitCast(du16, chunk), h16 = hn::BitCast(du16, high);
    const auto nibble = r < 2 ? c16 : hn::ShiftRight<4>(c16);
    hn::Vec<decltype(du16)> top;
    if constexpr (r < 2) {
      top = hn::ShiftLeft<4 - 2 * r>(h16);
    } else if constexpr (r == 2) {
      top = h16;
    } else {
      top = hn::ShiftRight<2>(h16);
    }
    return hn::Or(hn::And(hn::BitCast(du8, nibble), hn::Set(du8, 0x0F)),
                  hn::And(hn::BitCast(du8, top), hn::Set(du8, 0x30)));
  }

  // Bytes 16p..16p + 15 of the chunks of half h at a time, unrolled so that the byte offsets and
  // shifts are constants: body(h, p, a, bq, hq) with the chunks transposed (h and p
  // integral_constants). Sub-block 8h + 2r + p takes Level<r> of a (r even) or bq, and hq.
  template <class Body>
  static HWY_INLINE void ForEachQuarter(const WBlock* const* HWY_RESTRICT rows, size_t b,
                                        const Body& body) {
    Unroll<4>([&](auto i_constant) HWY_ATTR {
      constexpr size_t h = decltype(i_constant)::value / 2, p = decltype(i_constant)::value % 2;
      QVU8Full a[4], bq[4], hq[4];
      TransposeBlockBytes(rows, b, 64 * h + 16 * p, a);
      TransposeBlockBytes(rows, b, 64 * h + 32 + 16 * p, bq);
      TransposeBlockBytes(rows, b, offsetof(WBlock, qh) + 32 * h + 16 * p, hq);
      body(std::integral_constant<size_t, h>(), std::integral_constant<size_t, p>(), a, bq, hq);
    });
  }

  // Each row's d (the last two bytes of the 210-byte block: the upper half of the word before).
  static HWY_INLINE hn::Vec<LDF> RowScales(const WBlock* const* HWY_RESTRICT rows,
                                           const LaneRowOffsets& offsets, size_t b) {
    static_assert(offsetof(WBlock, d) == sizeof(WBlock) - 2, "d ends the block");
    return HalvesToF32<true>(GatherBlockWords<offsetof(WBlock, d) - 2>(rows, offsets, b));
  }

  static HWY_INLINE void Pack(const WBlock* const* HWY_RESTRICT rows, const LaneRowOffsets& offsets,
                              size_t b, Packed& packed) {
    // The four levels of each quad together: on AVX2 all the chunks' quads would not stay in
    // registers across four passes.
    ForEachQuarter(
        rows, b, [&](auto h, auto p, const auto& a, const auto& bq, const auto& hq) HWY_ATTR {
          for (size_t s = 0; s < 4; ++s) {
            QVU8Full* q = packed.q + 32 * decltype(h)::value + 4 * decltype(p)::value + s;
            q[0] = Level<0>(a[s], hq[s]);  // sub-block 8h + p
            q[8] = Level<1>(bq[s], hq[s]);
            q[16] = Level<2>(a[s], hq[s]);
            q[24] = Level<3>(bq[s], hq[s]);
          }
        });
    const LDI16 d16;
    QVU8Full words[4];
    // The 16 scales transposed like the quants (measured: faster than four gathers): scales
    // 4m..4m + 3 of row l are the bytes of lane l of words[m].
    TransposeBlockBytes(rows, b, offsetof(WBlock, scales), words);
    auto high_pairs = [&](size_t m, QVU8Full index) {
      return hn::BitCast(d16, hn::TableLookupBytesOr0(words[m], index));
    };
    Unroll<4>([&](auto j_constant) HWY_ATTR {
      constexpr int j = decltype(j_constant)::value;
      for (size_t m = 0; m < 4; ++m) {
        packed.scales[4 * m + j] = hn::ShiftRight<8>(high_pairs(m, PairIndex<j, j, true>()));
      }
    });
    for (size_t m = 0; m < 4; ++m) {  // x 32 by shifting right 3 rather than 8 (|32 x s| <= 4096)
      packed.offsets[2 * m] = hn::ShiftRight<3>(high_pairs(m, PairIndex<0, 1, true>()));
      packed.offsets[2 * m + 1] = hn::ShiftRight<3>(high_pairs(m, PairIndex<2, 3, true>()));
    }
    packed.d = RowScales(rows, offsets, b);
  }

  template <size_t T, bool kDotQuads = kHasDotQuads>
  static HWY_INLINE void Dot(const Packed& packed, const XBlock* const* HWY_RESTRICT x,
                             const Terms* const* HWY_RESTRICT terms, size_t b,
                             hn::Vec<LDF> (&acc)[T]) {
    const LDU32 du32;
    const LDI16 d16;
    const LDF df;
    // The offset: isum starts at -32 x sum(scale x bsum) (|isum| < 16 x 128 x 16 x 64 x 128).
    hn::Vec<LDI32> isum[T];
    for (size_t t = 0; t < T; ++t) {
      for (size_t k = 0; k < 8; ++k) {
        const auto pair = hn::BitCast(d16, hn::Set(du32, terms[t][b].neg_sum_pairs[k]));
        const auto m = MulPairsI16(packed.offsets[k], pair);
        isum[t] = k == 0 ? m : hn::Add(isum[t], m);
      }
    }
    for (size_t k = 0; k < 16; ++k) {
      if constexpr (kDotQuads) {
        // vpdpbusd: the 16 elements' int32 dot, times the row's scale (the int16 pair's upper
        // half, sign-extended) as one int32 multiply: the same integers as below.
        const auto scale = hn::ShiftRight<16>(hn::BitCast(LDI32(), packed.scales[k]));
        for (size_t t = 0; t < T; ++t) {
          const int8_t* xq = x[t][b].qs + 16 * k;
          auto dot = DotQuads<kDotQuads>(hn::Zero(LDI32()), packed.q[4 * k], BroadcastQuad(xq));
          auto dot_odd =
              DotQuads<kDotQuads>(hn::Zero(LDI32()), packed.q[4 * k + 1], BroadcastQuad(xq + 4));
          dot = DotQuads<kDotQuads>(dot, packed.q[4 * k + 2], BroadcastQuad(xq + 8));
          dot_odd = DotQuads<kDotQuads>(dot_odd, packed.q[4 * k + 3], BroadcastQuad(xq + 12));
          isum[t] = hn::Add(isum[t], hn::Mul(hn::Add(dot, dot_odd), scale));
        }
        continue;
      }
      for (size_t g = 0; g < 2; ++g) {  // quads 4k + 2g, 4k + 2g + 1
        const auto l0 = packed.q[4 * k + 2 * g], l1 = packed.q[4 * k + 2 * g + 1];
        for (size_t t = 0; t < T; ++t) {
          const int8_t* xq = x[t][b].qs + 16 * k + 8 * g;
          const auto sum16 =
              hn::Add(MulPairsU8I8(l0, BroadcastQuad(xq)), MulPairsU8I8(l1, BroadcastQuad(xq + 4)));
          isum[t] = hn::Add(isum[t], MulPairsI16(sum16, packed.scales[k]));
        }
      }
    }
    for (size_t t = 0; t < T; ++t) {
      const auto dx = hn::Set(df, terms[t][b].d);
      acc[t] = hn::MulAdd(hn::ConvertTo(df, isum[t]), hn::Mul(packed.d, dx), acc[t]);
    }
  }

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
  // A single token's terms in lane-pair order (quant_lanes_paired-inl.h): lane 2l + h takes half
  // h of each block, whose sub-block k (0..7) is the block's 8h + k.
  struct PairTerms {
    int8_t qs[256];            // pair 4k + s: elements 16k + 4s..+3, then 128 + 16k + 4s..+3
    int32_t level_offset[16];  // pair k: -32 bsums[k], -32 bsums[8 + k]
    float d;
  };

  static HWY_INLINE void ComputePairTerms(const XBlock* x, size_t /*n_blocks: 1*/,
                                          PairTerms& terms) {
    InterleaveHalves(x->qs, terms.qs);
    for (size_t k = 0; k < 8; ++k) {
      terms.level_offset[2 * k] = -32 * int32_t(x->bsums[k]);
      terms.level_offset[2 * k + 1] = -32 * int32_t(x->bsums[8 + k]);
    }
    terms.d = x->d;
  }

  // A single token against the block at base[l] of 8 rows, half h of row l in lane 2l + h, the
  // chunks of half h at their offsets there: Dot<1>'s integers, a sub-block at a time as its
  // levels are made (the 64 packed vectors would not fit in registers). The levels (0..63) enter
  // vpdpbusd unsigned as they are, in a chain that starts at the offset's -32 x the sub-block's
  // activation sum, and the dot of level - 32 is multiplied by its scale as int32 (|isum| < 16 x
  // 128 x 16 x 64 x 128). The scales come from the 16 bytes at 192 (lane 2l: scales 0..7 in
  // words 0-1) and at 194 (lane 2l + 1: scales 8..15 are bytes 6..13, and word 3's upper half is
  // d), so no read passes the block's end.
  template <bool kLast>
  static HWY_INLINE hn::Vec<PDF> PairedDot(const uint8_t* const* HWY_RESTRICT base,
                                           const PairTerms& xt, hn::Vec<PDF> acc) {
    const LDI32 d32;
    static_assert(offsetof(WBlock, scales) == 192 && offsetof(WBlock, d) == 208, "Q6_K layout");
    QVU8Full low_words[4], high_words[4];
    TransposeHalves(base, 192, 192, low_words);
    TransposeHalves(base, 194, 194, high_words);
    auto isum = hn::Zero(d32);
    Unroll<2>([&](auto p_constant) HWY_ATTR {
      constexpr size_t p = decltype(p_constant)::value;
      QVU8Full a[4], bq[4], hq[4];
      TransposeHalves(base, 16 * p, 64 + 16 * p, a);
      TransposeHalves(base, 32 + 16 * p, 96 + 16 * p, bq);
      TransposeHalves(base, 128 + 16 * p, 160 + 16 * p, hq);
      Unroll<4>([&](auto r_constant) HWY_ATTR {
        constexpr size_t r = decltype(r_constant)::value, k = 2 * r + p;
        // Scale k of lane 2l (byte k of low_words) and 8 + k of lane 2l + 1 (byte 6 + k of
        // high_words), sign-extended.
        constexpr size_t kHighByte = 6 + k;
        const auto words = hn::IfThenElse(OddLanes(), hn::BitCast(d32, high_words[kHighByte / 4]),
                                          hn::BitCast(d32, low_words[k / 4]));
        const auto shifts = hn::BitCast(
            d32, hn::Set(LDU64(), uint64_t(24 - 8 * (k % 4)) | uint64_t(24 - 8 * (kHighByte % 4))
                                                                  << 32));
        const auto scale = hn::ShiftRight<24>(hn::Shl(words, shifts));
        auto dot = BroadcastPair(xt.level_offset + 2 * k);
        for (size_t s = 0; s < 4; ++s) {
          const QVU8Full levels = Level<r>(r % 2 == 0 ? a[s] : bq[s], hq[s]);
          dot = DotQuads<true>(dot, levels, BroadcastQuadPair(xt.qs + 8 * (4 * k + s)));
        }
        isum = hn::Add(isum, hn::Mul(dot, scale));
      });
    });
    const auto d = OddUpperHalvesToF32(high_words[3]);
    const hn::Vec<PDF> prod = hn::Mul(d, hn::Set(PDF(), xt.d));
    return hn::MulAdd(hn::ConvertTo(PDF(), SumLanePairs(isum)), prod, acc);
  }
#endif
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_LANES_MATMUL_TARGET(Q6_K)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(Q6_K)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
