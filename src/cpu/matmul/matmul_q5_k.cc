// mat_mul for Q5_K weights: one Highway foreach_target TU over the rows-in-lanes driver
// (quant_lanes_driver-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// As Q4_K (matmul_q4_k.cc: the same scales, mins and nibble chunks, quant_lanes_k4-inl.h) plus
// a fifth bit per element: element 32k + i of sub-block k has bit k of qh[i] on top of its
// nibble, so levels are 0..31. Pack transposes the nibble chunks and qh alike (lane l of a
// vector: 4 bytes of row l) and puts the levels together there, once per row group and token
// chunk rather than per tile: q[8k + s] holds elements 32k + 4s..32k + 4s + 3. A pair sum is at
// most 2 x 31 x 128, so a 16-bit lane adds four of them (31744 < 32767): each sub-block's two
// halves take one scale multiply-add each. A single token makes and dots the levels half a
// sub-block at a time (PackDot): the 64 packed vectors would not fit in registers.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul/matmul_q5_k.cc"
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
  using WBlock = quant::BlockQ5_K;
  static constexpr DType kType = DType::kQ5_K;
  static constexpr size_t kElems = quant::kQK_K;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_K;
  // Single tokens on AVX3_DL stay there, on paired lanes (PairedDot); on AVX3 they take the AVX2
  // code with vpmaddubsw (PETREL_LANES_SINGLE_TOKEN_HOP, docs/PERFORMANCE.md).
  static constexpr bool kSingleTokenDotQuads = false;
  static constexpr bool kSingleTokenFullWidth = true;
  using Terms = K4Terms;
  struct Packed {
    // Defined here, inside the target region: GCC compiles the implicit constructor of a
    // struct of vectors without the target's options, and then cannot inline the vectors'
    // constructors into it on AArch64 NEON ("target specific option mismatch").
    HWY_INLINE Packed() {}
    QVU8Full q[64];  // quad 8k + s: elements 32k + 4s..32k + 4s + 3, levels 0..31
    K4Scales scales;
  };

  static HWY_INLINE void ComputeTerms(const XBlock& x, Terms& terms) { ComputeK4Terms(x, terms); }

  // The levels of sub-block k (k = 2j + p) from transposed bytes of chunk j (nibble p) and of qh
  // (bit k). The 16-bit shifts carry bits across bytes; the masks clear them.
  template <size_t k>
  static HWY_INLINE QVU8Full Level(QVU8Full nibbles, QVU8Full high) {
    const LDU8 du8;
    const hn::Repartition<uint16_t, LDU8> du16;
    const auto q16 = hn::BitCast(du16, nibbles), h16 = hn::BitCast(du16, high);
    const auto nibble = k % 2 == 0 ? q16 : hn::ShiftRight<4>(q16);
    hn::Vec<decltype(du16)> top;
    if constexpr (k <= 4) {
      top = hn::ShiftLeft<4 - k>(h16);
    } else {
      top = hn::ShiftRight<k - 4>(h16);
    }
    return hn::Or(hn::And(hn::BitCast(du8, nibble), hn::Set(du8, 0x0F)),
                  hn::And(hn::BitCast(du8, top), hn::Set(du8, 0x10)));
  }

  // Bytes 16h..16h + 15 of qh and of each chunk at a time (elements 16h.. of each sub-block),
  // unrolled so that the byte offsets and shifts are constants: body(k, h, levels[4]).
  template <class Body>
  static HWY_INLINE void ForEachHalfSubBlock(const WBlock* const* HWY_RESTRICT rows, size_t b,
                                             const Body& body) {
    Unroll<2>([&](auto h_constant) HWY_ATTR {
      constexpr size_t h = decltype(h_constant)::value;
      QVU8Full high[4];
      TransposeBlockBytes(rows, b, offsetof(WBlock, qh) + 16 * h, high);
      Unroll<4>([&](auto j_constant) HWY_ATTR {
        constexpr size_t j = decltype(j_constant)::value;
        QVU8Full nibbles[4];
        TransposeBlockBytes(rows, b, offsetof(WBlock, qs) + 32 * j + 16 * h, nibbles);
        QVU8Full levels[4];
        for (size_t s = 0; s < 4; ++s) levels[s] = Level<2 * j>(nibbles[s], high[s]);
        body(2 * j, h, levels);
        for (size_t s = 0; s < 4; ++s) levels[s] = Level<2 * j + 1>(nibbles[s], high[s]);
        body(2 * j + 1, h, levels);
      });
    });
  }

  static HWY_INLINE void Pack(const WBlock* const* HWY_RESTRICT rows, const LaneRowOffsets& offsets,
                              size_t b, Packed& packed) {
    ForEachHalfSubBlock(rows, b, [&](size_t k, size_t h, const QVU8Full(&levels)[4]) HWY_ATTR {
      for (size_t s = 0; s < 4; ++s) packed.q[8 * k + 4 * h + s] = levels[s];
    });
    PackK4Scales(rows, b, packed.scales);
  }

  // The int32 dot of 16 levels (a half sub-block) with the activations at xq, times the row's
  // scale (0..63): a pair sum is at most 2 x 31 x 128, four add in 16 bits. With vpdpbusd, in
  // two chains and one int32 multiply: the same integers.
  template <bool kDotQuads>
  static HWY_INLINE hn::Vec<LDI32> ScaledHalfDot(const QVU8Full* HWY_RESTRICT levels,
                                                 const int8_t* HWY_RESTRICT xq,
                                                 hn::Vec<LDI16> scale) {
    if constexpr (kDotQuads) {
      auto dot = DotQuads<kDotQuads>(hn::Zero(LDI32()), levels[0], BroadcastQuad(xq));
      auto dot_odd = DotQuads<kDotQuads>(hn::Zero(LDI32()), levels[1], BroadcastQuad(xq + 4));
      dot = DotQuads<kDotQuads>(dot, levels[2], BroadcastQuad(xq + 8));
      dot_odd = DotQuads<kDotQuads>(dot_odd, levels[3], BroadcastQuad(xq + 12));
      return hn::Mul(hn::Add(dot, dot_odd), hn::ShiftRight<16>(hn::BitCast(LDI32(), scale)));
    } else {
      auto sum16 = hn::Add(MulPairsU8I8(levels[0], BroadcastQuad(xq)),
                           MulPairsU8I8(levels[1], BroadcastQuad(xq + 4)));
      sum16 = hn::Add(sum16, hn::Add(MulPairsU8I8(levels[2], BroadcastQuad(xq + 8)),
                                     MulPairsU8I8(levels[3], BroadcastQuad(xq + 12))));
      return MulPairsI16(sum16, scale);
    }
  }

  // A single token: Pack then Dot<1>'s integers, each half sub-block dotted as soon as its
  // levels are made (the 64 packed vectors would not fit in registers).
  template <bool kDotQuads>
  static HWY_INLINE void PackDot(const WBlock* const* HWY_RESTRICT rows,
                                 const LaneRowOffsets& offsets, const XBlock* const* HWY_RESTRICT x,
                                 const Terms* const* HWY_RESTRICT terms, size_t b,
                                 hn::Vec<LDF> (&acc)[1]) {
    K4Scales scales;
    PackK4Scales(rows, b, scales);
    hn::Vec<LDI32> isum[1] = {hn::Zero(LDI32())};
    ForEachHalfSubBlock(rows, b, [&](size_t k, size_t h, const QVU8Full(&levels)[4]) HWY_ATTR {
      isum[0] = hn::Add(isum[0], ScaledHalfDot<kDotQuads>(levels, x[0][b].qs + 32 * k + 16 * h,
                                                          scales.scales[k]));
    });
    AccumulateK4<1>(scales, terms, b, isum, acc);
  }

  template <size_t T, bool kDotQuads = kHasDotQuads>
  static HWY_INLINE void Dot(const Packed& packed, const XBlock* const* HWY_RESTRICT x,
                             const Terms* const* HWY_RESTRICT terms, size_t b,
                             hn::Vec<LDF> (&acc)[T]) {
    hn::Vec<LDI32> isum[T];
    for (size_t k = 0; k < 8; ++k) {
      for (size_t h = 0; h < 2; ++h) {
        for (size_t t = 0; t < T; ++t) {
          const auto scaled = ScaledHalfDot<kDotQuads>(
              packed.q + 8 * k + 4 * h, x[t][b].qs + 32 * k + 16 * h, packed.scales.scales[k]);
          isum[t] = k == 0 && h == 0 ? scaled : hn::Add(isum[t], scaled);
        }
      }
    }
    AccumulateK4<T>(packed.scales, terms, b, isum, acc);
  }

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3_DL
  // A single token against the block at base[l] of 8 rows, half h of row l (sub-blocks
  // 4h..4h + 3: chunks 2h, 2h + 1) in lane 2l + h: PackDot's integers. Both halves read the same
  // qh bytes; lane 2l + 1's are shifted down 4 bits first, so that local sub-block k's bit is bit
  // k in either lane.
  template <bool kLast>
  static HWY_INLINE hn::Vec<PDF> PairedDot(const uint8_t* const* HWY_RESTRICT base,
                                           const PairTerms& xt, hn::Vec<PDF> acc) {
    const LDI32 d32;
    const LDU32 du32;
    PairedK4Scales scales;
    PackPairedK4Scales(base, scales);
    const auto high_shift = hn::BitCast(du32, hn::Set(LDU64(), uint64_t{4} << 32));
    auto isum = hn::Zero(d32);
    Unroll<2>([&](auto h_constant) HWY_ATTR {
      constexpr size_t h = decltype(h_constant)::value;  // bytes 16h..16h + 15 of qh and chunks
      constexpr size_t kQh = offsetof(WBlock, qh) + 16 * h, kQs = offsetof(WBlock, qs) + 16 * h;
      QVU8Full high[4];
      TransposeHalves(base, kQh, kQh, high);
      for (size_t s = 0; s < 4; ++s) {
        high[s] = hn::BitCast(LDU8(), hn::Shr(hn::BitCast(du32, high[s]), high_shift));
      }
      Unroll<2>([&](auto j_constant) HWY_ATTR {
        constexpr size_t j = decltype(j_constant)::value;  // chunk 2h' + j of half h'
        QVU8Full nibbles[4];
        TransposeHalves(base, kQs + 32 * j, kQs + 64 + 32 * j, nibbles);
        Unroll<2>([&](auto p_constant) HWY_ATTR {
          constexpr size_t k = 2 * j + decltype(p_constant)::value;  // local sub-block
          const int8_t* xq = xt.qs + 8 * (8 * k + 4 * h);
          auto level = [&](size_t s) { return Level<k>(nibbles[s], high[s]); };
          auto dot = DotQuads<true>(hn::Zero(d32), level(0), BroadcastQuadPair(xq));
          auto dot_odd = DotQuads<true>(hn::Zero(d32), level(1), BroadcastQuadPair(xq + 8));
          dot = DotQuads<true>(dot, level(2), BroadcastQuadPair(xq + 16));
          dot_odd = DotQuads<true>(dot_odd, level(3), BroadcastQuadPair(xq + 24));
          isum = hn::Add(isum, hn::Mul(hn::Add(dot, dot_odd), PairedK4Scale<k>(scales)));
        });
      });
    });
    return AccumulatePairedK4(scales, xt, isum, acc);
  }
#endif
#endif  // PETREL_QUANT_SIMD
};

}  // namespace

PETREL_LANES_MATMUL_TARGET(Q5_K)

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace petrel::cpu {

PETREL_QUANT_MATMUL_DISPATCH(Q5_K)

}  // namespace petrel::cpu
#endif  // HWY_ONCE
