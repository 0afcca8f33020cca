// mat_mul for Q8_0 weights: one Highway foreach_target TU over the rows-in-lanes driver
// (quant_lanes_driver-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// Lane l of packed vector g holds bytes 4g..4g+3 of row l (element group g). Both operands are
// signed: with vpdpbusd the weights are offset to unsigned (Format::Dot), else DotSignedGroups.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_q8_0.cc"
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

struct Format
#if PETREL_QUANT_SIMD
    : Lanes32Format<Format, 8, 0>
#endif
{
  using WBlock = quant::BlockQ8_0;
  static constexpr DType kType = DType::kQ8_0;
  static constexpr size_t kElems = quant::kQK;
#if PETREL_QUANT_SIMD

  static HWY_INLINE void PackQuants(const WBlock* const* HWY_RESTRICT rows,
                                    const LaneRowOffsets& /*offsets*/, size_t b,
                                    QVU8Full (&p)[kPacked]) {
    const uint8_t* src[kLaneRows];
    QVU8Full half[4];
    for (size_t h = 0; h < 2; ++h) {
      for (size_t l = 0; l < kLaneRows; ++l)
        src[l] = reinterpret_cast<const uint8_t*>(rows[l][b].qs) + 16 * h;
      TransposeWords(src, half);
      for (size_t s = 0; s < 4; ++s) p[4 * h + s] = half[s];
    }
  }

  // Per (token, block) activation terms: the scale, and -128 sum(x) for vpdpbusd's unsigned
  // weights (Dot).
  struct Terms {
    float d;
    int32_t unsigned_offset;
  };

  static HWY_INLINE void ComputeTerms(const XBlock& x, Terms& terms) {
    terms.d = HalfToF32(x.d);
    terms.unsigned_offset = -128 * ActivationSum(x);
  }

  // With vpdpbusd (kDotQuads) the weights enter as w + 128 (w xor 0x80, unsigned) and the
  // activations as they are, and the chain starts at -128 sum(x): the same exact integer as the
  // sign trick (DotSignedGroups), without its vpabsb per group and sign per group and token. A
  // lane's sums stay far inside int32 (8 x 4 x 255 x 128). vpmaddubsw's int16 pairs would
  // saturate on 255, so without it the sign trick stays.
  template <size_t T, bool kDotQuads = kHasDotQuads>
  static HWY_INLINE void Dot(const Packed& packed, const XBlock* const* HWY_RESTRICT x,
                             const Terms* const* HWY_RESTRICT terms, size_t b,
                             hn::Vec<LDF> (&acc)[T]) {
    const LDI32 d32;
    const LDF df;
    hn::Vec<LDI32> isum[T];
    if constexpr (kDotQuads) {
      const LDU8 du8;
      const auto bias = hn::Set(du8, 0x80);
      hn::Vec<LDI32> odd_sum[T];
      for (size_t t = 0; t < T; ++t) {
        isum[t] = hn::Set(d32, terms[t][b].unsigned_offset);
        odd_sum[t] = hn::Zero(d32);
      }
      for (size_t g = 0; g < kPacked; ++g) {
        const auto u = hn::Xor(packed.q[g], bias);
        for (size_t t = 0; t < T; ++t) {
          auto& sum = g % 2 == 0 ? isum[t] : odd_sum[t];
          sum = DotQuads<kDotQuads>(sum, u, BroadcastQuad(x[t][b].qs + 4 * g));
        }
      }
      for (size_t t = 0; t < T; ++t) isum[t] = hn::Add(isum[t], odd_sum[t]);
    } else {
      DotSignedGroups<kPacked, T, kDotQuads>(packed.q, x, b, isum);
    }
    for (size_t t = 0; t < T; ++t) {
      acc[t] = hn::MulAdd(hn::ConvertTo(df, isum[t]), hn::Mul(packed.d, hn::Set(df, terms[t][b].d)),
                          acc[t]);
    }
  }

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
  // Single tokens on AVX3_DL stay there, on paired lanes (quant_lanes_paired-inl.h): lane 2l + h
  // holds bytes 16h..16h + 15 of row l's block.
  static constexpr bool kSingleTokenFullWidth = true;
  struct PairTerms {
    int8_t qs[32];               // quad pair s: elements 4s..4s + 3, then 16 + 4s..16 + 4s + 3
    int32_t unsigned_offset[2];  // Terms' (for lane 2l), 0
    float d;
  };

  static HWY_INLINE void ComputePairTerms(const XBlock* x, size_t /*n_blocks: 1*/,
                                          PairTerms& terms) {
    for (size_t s = 0; s < 4; ++s) {
      std::memcpy(terms.qs + 8 * s, x->qs + 4 * s, 4);
      std::memcpy(terms.qs + 8 * s + 4, x->qs + 16 + 4 * s, 4);
    }
    Terms plain;
    ComputeTerms(*x, plain);
    terms.unsigned_offset[0] = plain.unsigned_offset;
    terms.unsigned_offset[1] = 0;
    terms.d = plain.d;
  }

  // A single token against the block at base[l] of 8 rows: Dot<1>'s integers, each row's halves
  // added.
  template <bool kLast>
  static HWY_INLINE hn::Vec<PDF> PairedDot(const uint8_t* const* HWY_RESTRICT base,
                                           const PairTerms& xt, hn::Vec<PDF> acc) {
    const LDI32 d32;
    QVU8Full q[4];
    TransposeHalves(base, offsetof(WBlock, qs), offsetof(WBlock, qs) + 16, q);
    const auto bias = hn::Set(LDU8(), 0x80);
    auto isum = BroadcastPair(xt.unsigned_offset), odd_sum = hn::Zero(d32);
    for (size_t s = 0; s < 4; s += 2) {
      isum = DotQuads<true>(isum, hn::Xor(q[s], bias), BroadcastQuadPair(xt.qs + 8 * s));
      odd_sum =
          DotQuads<true>(odd_sum, hn::Xor(q[s + 1], bias), BroadcastQuadPair(xt.qs + 8 * s + 8));
    }
    const auto scales = hn::Mul(RowHalvesToF32(base, 0), hn::Set(PDF(), xt.d));
    return hn::MulAdd(hn::ConvertTo(PDF(), SumLanePairs(hn::Add(isum, odd_sum))), scales, acc);
  }
#endif
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_LANES_MATMUL_TARGET(Q8_0)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(Q8_0)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
