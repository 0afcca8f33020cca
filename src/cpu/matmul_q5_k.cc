// mat_mul for Q5_K weights: one Highway foreach_target TU over the rows-in-lanes driver
// (quant_lanes-inl.h), against the activations the mat_mul table (matmul_table.h) names.
//
// As Q4_K (matmul_q4_k.cc: the same scales, mins and nibble chunks, quant_lanes_k4-inl.h) plus
// a fifth bit per element: element 32k + i of sub-block k has bit k of qh[i] on top of its
// nibble, so levels are 0..31. Pack transposes the nibble chunks and qh alike (lane l of a
// vector: 4 bytes of row l) and puts the levels together there, once per row group and token
// chunk rather than per tile: q[8k + s] holds elements 32k + 4s..32k + 4s + 3. A pair sum is at
// most 2 x 31 x 128, so a 16-bit lane adds four of them (31744 < 32767): each sub-block's two
// halves take one scale multiply-add each.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/matmul_q5_k.cc"
// clang-format off: foreach_target.h, then highway.h, before anything else that includes Highway.
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernel_entry_points.h"
#include "cpu/matmul_entry.h"
#include "cpu/quant_lanes-inl.h"
#include "cpu/quant_lanes_k4-inl.h"

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace {

struct Format {
  using WBlock = quant::BlockQ5_K;
  static constexpr DType kType = DType::kQ5_K;
  static constexpr size_t kElems = quant::kQK_K;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_K;
  // Single tokens on AVX3_DL keep the vpmaddubsw code, as Q4_K's (docs/PERFORMANCE.md).
  static constexpr bool kSingleTokenDotQuads = false;
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

  // Bit k of each byte of `high` moved to bit 4 (the 16-bit shifts carry bits across bytes; the
  // caller's mask clears them).
  template <size_t k, class V>
  static HWY_INLINE V FifthBit(V high) {
    if constexpr (k <= 4) {
      return hn::ShiftLeft<4 - k>(high);
    } else {
      return hn::ShiftRight<k - 4>(high);
    }
  }

  static HWY_INLINE void Pack(const WBlock* const* HWY_RESTRICT rows, const LaneRowOffsets& offsets,
                              size_t b, Packed& packed) {
    const LDU8 du8;
    const hn::Repartition<uint16_t, LDU8> du16;
    const auto mask = hn::Set(du8, 0x0F), sixteen = hn::Set(du8, 0x10);
    auto transpose = [&](size_t offset, QVU8Full(&quads)[4]) HWY_ATTR {
      const uint8_t* src[kLaneRows];
      for (size_t l = 0; l < kLaneRows; ++l) {
        src[l] = reinterpret_cast<const uint8_t*>(rows[l] + b) + offset;
      }
      TransposeWords(src, quads);
    };
    // Bytes 16h..16h + 15 of qh and of each chunk at a time, unrolled so that the byte offsets
    // and shifts are constants.
    Unroll<2>([&](auto h_constant) HWY_ATTR {
      constexpr size_t h = decltype(h_constant)::value;
      QVU8Full high[4];
      transpose(offsetof(WBlock, qh) + 16 * h, high);
      Unroll<4>([&](auto j_constant) HWY_ATTR {
        constexpr size_t j = decltype(j_constant)::value;
        QVU8Full nibbles[4];
        transpose(offsetof(WBlock, qs) + 32 * j + 16 * h, nibbles);
        for (size_t s = 0; s < 4; ++s) {
          const auto q16 = hn::BitCast(du16, nibbles[s]), h16 = hn::BitCast(du16, high[s]);
          auto level = [&](auto nibble, auto top) HWY_ATTR {
            return hn::Or(hn::And(hn::BitCast(du8, nibble), mask),
                          hn::And(hn::BitCast(du8, top), sixteen));
          };
          packed.q[8 * (2 * j) + 4 * h + s] = level(q16, FifthBit<2 * j>(h16));
          packed.q[8 * (2 * j + 1) + 4 * h + s] =
              level(hn::ShiftRight<4>(q16), FifthBit<2 * j + 1>(h16));
        }
      });
    });
    PackK4Scales(rows, offsets, b, packed.scales);
  }

  template <size_t T, bool kDotQuads = kHasDotQuads>
  static HWY_INLINE void Dot(const Packed& packed, const XBlock* const* HWY_RESTRICT x,
                             const Terms* const* HWY_RESTRICT terms, size_t b,
                             hn::Vec<LDF> (&acc)[T]) {
    hn::Vec<LDI32> isum[T];
    for (size_t k = 0; k < 8; ++k) {
      const QVU8Full* q = packed.q + 8 * k;
      if constexpr (kDotQuads) {
        // vpdpbusd: the sub-block's int32 dot in two chains, times the row's scale (the int16
        // pair's upper half; 0..63) as one int32 multiply: the same integers as below.
        const auto scale = hn::ShiftRight<16>(hn::BitCast(LDI32(), packed.scales.scales[k]));
        for (size_t t = 0; t < T; ++t) {
          const int8_t* xq = x[t][b].qs + 32 * k;
          auto dot = hn::Zero(LDI32()), dot_odd = hn::Zero(LDI32());
          for (size_t s = 0; s < 8; s += 2) {
            dot = DotQuads<kDotQuads>(dot, q[s], BroadcastQuad(xq + 4 * s));
            dot_odd = DotQuads<kDotQuads>(dot_odd, q[s + 1], BroadcastQuad(xq + 4 * s + 4));
          }
          const auto scaled = hn::Mul(hn::Add(dot, dot_odd), scale);
          isum[t] = k == 0 ? scaled : hn::Add(isum[t], scaled);
        }
        continue;
      }
      for (size_t half = 0; half < 2; ++half) {
        hn::Vec<LDI16> sum16[T];
        for (size_t s = 4 * half; s < 4 * half + 4; ++s) {
          for (size_t t = 0; t < T; ++t) {
            const auto prod = MulPairsU8I8(q[s], BroadcastQuad(x[t][b].qs + 32 * k + 4 * s));
            sum16[t] = s == 4 * half ? prod : hn::Add(sum16[t], prod);
          }
        }
        for (size_t t = 0; t < T; ++t) {
          const auto scaled = MulPairsI16(sum16[t], packed.scales.scales[k]);
          isum[t] = k == 0 && half == 0 ? scaled : hn::Add(isum[t], scaled);
        }
      }
    }
    AccumulateK4<T>(packed.scales, terms, b, isum, acc);
  }
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
