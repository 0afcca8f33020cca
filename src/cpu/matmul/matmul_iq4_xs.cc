// mat_mul for IQ4_XS weights: one Highway foreach_target TU over the rows-in-lanes driver
// (quant_lanes_driver-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// A super-block is eight IQ4_NL-like sub-blocks of 32 (16 nibble bytes each, indexing the
// non-linear grid) with a 6-bit signed scale each and one f16 d. Packed, each sub-block is
// IQ4_NL's packed block (PackGridNibbles: signed levels); the scales of the kLaneRows rows are
// decoded as int32 lanes from the first two words of the transposed block heads. Per token and
// sub-block, DotSignedGroups gives the exact int32 dot, which is multiplied by the sub-block scale
// and summed over the super-block (at most 8 x 32 x 127 x 127 x 32, well inside int32), then scaled
// by d_w d_x once.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_iq4_xs.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include <cstddef>  // offsetof

#include "cpu/kernel_entry_points.h"
#include "cpu/matmul/matmul_entry.h"
#include "cpu/matmul/quant_lanes_driver-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format {
  using WBlock = quant::BlockIQ4_XS;
  static constexpr DType kType = DType::kIQ4_XS;
  static constexpr size_t kElems = quant::kQK_K;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_K;
  // Single tokens on AVX3_DL stay there, on paired lanes (PairedDot) rather than hop to the AVX2
  // code: the 512-bit code measured faster for this format, and the paired lanes compute it
  // faster still on half the row streams. Were they to hop, the 256-bit vpdpbusd step measured
  // no faster than vpmaddubsw there (docs/PERFORMANCE.md).
  static constexpr bool kSingleTokenDotQuads = false;
  static constexpr bool kSingleTokenFullWidth = true;
  // Each row stream fetched 512 bytes ahead rather than the driver's 1 KB: with the scales no
  // longer gathered, one thread read faster from memory so (docs/PERFORMANCE.md).
  static constexpr size_t kStreamAheadBytes = 512;
  struct Terms {
    float d;
    int32_t unsigned_offset[8];  // sub-block ib: -128 sum(x) (SubBlockDot's unsigned levels)
  };
  struct Packed {
    // Defined here, inside the target region: GCC compiles the implicit constructor of a
    // struct of vectors without the target's options, and then cannot inline the vectors'
    // constructors into it on AArch64 NEON ("target specific option mismatch").
    HWY_INLINE Packed() {}
    QVU8Full q[8][8];           // sub-block ib: IQ4_NL's packed groups
    hn::Vec<LDI32> scales[8];   // sub-block ib: each row's scale (-32..31)
    hn::Vec<LDF> d;
  };

  static HWY_INLINE void ComputeTerms(const XBlock& x, Terms& terms) {
    terms.d = x.d;
    for (size_t ib = 0; ib < 8; ++ib) {
      terms.unsigned_offset[ib] = -128 * (int32_t(x.bsums[2 * ib]) + x.bsums[2 * ib + 1]);
    }
  }

  // Sub-block ib's packed grid levels of block b of each row.
  static HWY_INLINE void PackSubBlock(const WBlock* const* HWY_RESTRICT rows, size_t b, size_t ib,
                                      QVU8Full (&q)[8]) {
    const uint8_t* src[kLaneRows];
    for (size_t l = 0; l < kLaneRows; ++l) src[l] = rows[l][b].qs + 16 * ib;
    PackGridNibbles(src, q);
  }

  static HWY_INLINE void Pack(const WBlock* const* HWY_RESTRICT rows, const LaneRowOffsets& offsets,
                              size_t b, Packed& packed) {
    for (size_t ib = 0; ib < 8; ++ib) PackSubBlock(rows, b, ib, packed.q[ib]);
    PackScales(rows, b, packed.scales, packed.d);
  }

  static HWY_INLINE void PackScales(const WBlock* const* HWY_RESTRICT rows, size_t b,
                                    hn::Vec<LDI32> (&scales)[8], hn::Vec<LDF>& d) {
    static_assert(offsetof(WBlock, d) == 0 && offsetof(WBlock, scales_h) == 2 &&
                      offsetof(WBlock, scales_l) == 4,
                  "d, scales_h, scales_l start the block");
    // quant::IQ4XSScale for kLaneRows rows at once: low 4 bits from scales_l (nibble ib of the word
    // at byte 4), high 2 bits from scales_h (bits 2 ib of the upper half of the word at byte 0),
    // both words from one transpose of the block heads.
    const LDU32 du32;
    QVU8Full heads[4];  // d and scales_h, scales_l, then the first quants (unused)
    TransposeBlockBytes(rows, b, 0, heads);
    const auto w0 = hn::BitCast(du32, heads[0]), low_words = hn::BitCast(du32, heads[1]);
    const auto high_words = hn::ShiftRight<16>(w0);
    const auto four = hn::Set(du32, 0xF), three = hn::Set(du32, 3);
    const auto bias = hn::Set(LDI32(), 32);
    Unroll<8>([&](auto ib_constant) HWY_ATTR {
      constexpr int ib = decltype(ib_constant)::value;
      const auto low = hn::And(hn::ShiftRight<4 * ib>(low_words), four);
      const auto high = hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2 * ib>(high_words), three));
      scales[ib] = hn::Sub(hn::BitCast(LDI32(), hn::Or(low, high)), bias);
    });
    d = HalvesToF32<false>(w0);
  }

  // total[t] (ib == 0) or total[t] + sub-block ib's int32 dot (q: its signed levels) with token
  // t's activations times the row's scale. With vpdpbusd (kDotQuads) the levels enter as
  // unsigned level + 128 (xor 0x80) from a chain that starts at -128 sum(x): the same integer
  // as the sign trick (DotSignedGroups), without its vpabsb per group and sign per group and
  // token (a lane's sums stay far inside int32: 8 x 4 x 241 x 128).
  template <size_t T, bool kDotQuads>
  static HWY_INLINE void SubBlockDot(const QVU8Full (&q)[8], hn::Vec<LDI32> scale, size_t ib,
                                     const XBlock* const* HWY_RESTRICT x,
                                     const Terms* const* HWY_RESTRICT terms, size_t b,
                                     hn::Vec<LDI32> (&total)[T]) {
    hn::Vec<LDI32> isum[T];
    if constexpr (kDotQuads) {
      const auto bias = hn::Set(LDU8(), 0x80);
      hn::Vec<LDI32> odd_sum[T];
      for (size_t t = 0; t < T; ++t) {
        isum[t] = hn::Set(LDI32(), terms[t][b].unsigned_offset[ib]);
        odd_sum[t] = hn::Zero(LDI32());
      }
      for (size_t g = 0; g < 8; ++g) {
        const auto u = hn::Xor(q[g], bias);
        for (size_t t = 0; t < T; ++t) {
          auto& sum = g % 2 == 0 ? isum[t] : odd_sum[t];
          sum = DotQuads<kDotQuads>(sum, u, BroadcastQuad(x[t][b].qs + 32 * ib + 4 * g));
        }
      }
      for (size_t t = 0; t < T; ++t) isum[t] = hn::Add(isum[t], odd_sum[t]);
    } else {
      DotSignedGroups<8, T, kDotQuads>(q, x, b, isum, 32 * ib);
    }
    for (size_t t = 0; t < T; ++t) {
      const auto scaled = hn::Mul(isum[t], scale);
      total[t] = ib == 0 ? scaled : hn::Add(total[t], scaled);
    }
  }

  template <size_t T>
  static HWY_INLINE void Accumulate(hn::Vec<LDF> d, const Terms* const* HWY_RESTRICT terms,
                                    size_t b, const hn::Vec<LDI32> (&total)[T],
                                    hn::Vec<LDF> (&acc)[T]) {
    const LDF df;
    for (size_t t = 0; t < T; ++t) {
      acc[t] = hn::MulAdd(hn::ConvertTo(df, total[t]), hn::Mul(d, hn::Set(df, terms[t][b].d)),
                          acc[t]);
    }
  }

  template <size_t T, bool kDotQuads = kHasDotQuads>
  static HWY_INLINE void Dot(const Packed& packed, const XBlock* const* HWY_RESTRICT x,
                             const Terms* const* HWY_RESTRICT terms, size_t b,
                             hn::Vec<LDF> (&acc)[T]) {
    hn::Vec<LDI32> total[T];
    for (size_t ib = 0; ib < 8; ++ib) {
      SubBlockDot<T, kDotQuads>(packed.q[ib], packed.scales[ib], ib, x, terms, b, total);
    }
    Accumulate<T>(packed.d, terms, b, total, acc);
  }

  // Pack then Dot<1> for a single token, a sub-block at a time: the 64 packed vectors would not
  // fit in registers. Only with vpdpbusd: on AVX2 it measured no faster than Pack and Dot.
  template <bool kDotQuads>
    requires kDotQuads
  static HWY_INLINE void PackDot(const WBlock* const* HWY_RESTRICT rows,
                                 const LaneRowOffsets& offsets, const XBlock* const* HWY_RESTRICT x,
                                 const Terms* const* HWY_RESTRICT terms, size_t b,
                                 hn::Vec<LDF> (&acc)[1]) {
    hn::Vec<LDI32> scales[8];
    hn::Vec<LDF> d;
    PackScales(rows, b, scales, d);
    hn::Vec<LDI32> total[1];
    for (size_t ib = 0; ib < 8; ++ib) {
      QVU8Full q[8];
      PackSubBlock(rows, b, ib, q);
      SubBlockDot<1, kDotQuads>(q, scales[ib], ib, x, terms, b, total);
    }
    Accumulate<1>(d, terms, b, total, acc);
  }

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
  // A single token's terms in lane-pair order (quant_lanes_paired-inl.h): lane 2l + h takes half
  // h of each block, sub-blocks 4h..4h + 3.
  struct PairTerms {
    int8_t qs[256];               // InterleaveHalves
    int32_t unsigned_offset[8];   // pair ib: Terms' ib, then 4 + ib
    float d;
  };

  static HWY_INLINE void ComputePairTerms(const XBlock* x, size_t /*n_blocks: 1*/,
                                          PairTerms& terms) {
    Terms plain;
    ComputeTerms(*x, plain);
    InterleaveHalves(x->qs, terms.qs);
    for (size_t ib = 0; ib < 4; ++ib) {
      terms.unsigned_offset[2 * ib] = plain.unsigned_offset[ib];
      terms.unsigned_offset[2 * ib + 1] = plain.unsigned_offset[4 + ib];
    }
    terms.d = plain.d;
  }

  // A single token against the block at base[l] of 8 rows, half h of row l in lane 2l + h:
  // PackDot's integers. PackScales' scale words are shifted by lane (16 and 8 bits more in lane
  // 2l + 1), so local sub-block ib's bits sit where sub-block ib's do in lane 2l.
  template <bool kLast>
  static HWY_INLINE hn::Vec<PDF> PairedDot(const uint8_t* const* HWY_RESTRICT base,
                                           const PairTerms& xt, hn::Vec<PDF> acc) {
    const LDU32 du32;
    const LDI32 d32;
    QVU8Full heads[4];
    TransposeHalves(base, 0, 0, heads);
    const auto w0 = hn::BitCast(du32, heads[0]);
    const auto odd_shift = [&](uint32_t bits) {
      return hn::BitCast(du32, hn::Set(LDU64(), uint64_t{bits} << 32));
    };
    const auto low_words = hn::Shr(hn::BitCast(du32, heads[1]), odd_shift(16));
    const auto high_words = hn::Shr(hn::ShiftRight<16>(w0), odd_shift(8));
    const auto four = hn::Set(du32, 0xF), three = hn::Set(du32, 3);
    const auto bias = hn::Set(d32, 32);
    const auto unsigned_bias = hn::Set(LDU8(), 0x80);
    auto total = hn::Zero(d32);
    Unroll<4>([&](auto ib_constant) HWY_ATTR {
      constexpr size_t ib = decltype(ib_constant)::value;
      const auto low = hn::And(hn::ShiftRight<4 * ib>(low_words), four);
      const auto high = hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2 * ib>(high_words), three));
      const auto scale = hn::Sub(hn::BitCast(d32, hn::Or(low, high)), bias);
      const uint8_t* src[kLaneRows];
      for (size_t l = 0; l < kPairRows; ++l) {
        src[2 * l] = base[l] + offsetof(WBlock, qs) + 16 * ib;
        src[2 * l + 1] = base[l] + offsetof(WBlock, qs) + 64 + 16 * ib;
      }
      QVU8Full q[8];
      PackGridNibbles(src, q);
      auto isum = BroadcastPair(xt.unsigned_offset + 2 * ib), odd_sum = hn::Zero(d32);
      for (size_t g = 0; g < 8; g += 2) {
        const int8_t* xq = xt.qs + 8 * (8 * ib + g);
        isum = DotQuads<true>(isum, hn::Xor(q[g], unsigned_bias), BroadcastQuadPair(xq));
        odd_sum =
            DotQuads<true>(odd_sum, hn::Xor(q[g + 1], unsigned_bias), BroadcastQuadPair(xq + 8));
      }
      total = hn::Add(total, hn::Mul(hn::Add(isum, odd_sum), scale));
    });
    const hn::Full256<hwy::float16_t> df16;
    const auto d = hn::PromoteTo(
        PDF(), hn::BitCast(hn::Half<decltype(df16)>(), TruncateTo16(EvenLanes(w0))));
    return hn::MulAdd(hn::ConvertTo(PDF(), SumLanePairs(total)), hn::Mul(d, hn::Set(PDF(), xt.d)),
                      acc);
  }
#endif
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_LANES_MATMUL_TARGET(IQ4_XS)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(IQ4_XS)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
