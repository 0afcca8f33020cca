// Per-target int8 dot products of quantized weight blocks with 8-bit activation blocks, and the
// register-tiled mat_mul driver the per-format TUs of MatMulDriver::kPairPerBlock instantiate
// (the mat_mul table, matmul_table.h, names them); its helpers also serve quant_lanes-inl.h.
//
// Scheme (as ggml's and llamafile's CPU kernels): the activation row is quantized once per op and
// token to Q8_0, Q8_1 or Q8_K. A weight block is decoded straight into int8 vectors in registers
// (unsigned levels, or signed levels for Q8_0 and the IQ4 grids), multiplied with the int8
// activations by the u8 x i8 pairwise multiply-add (x86: pmaddubsw, then pmaddwd against ones
// or the sub-block scales) into int32 lanes, converted to float and scaled by the two block
// scales into one f32 vector accumulator per (row, token). Level offsets (Q4_0's 8, Q6_K's 32)
// are subtracted in the int16 pair sums through `offset * (x0 + x1)`, so the int32 lanes equal
// those of the signed product exactly. Min terms go into a scalar accumulator per (row, token).
//
// Batch invariance: a tile of R rows x T tokens decodes each weight block once and uses it for
// its T tokens, but every (row, token) pair goes through the same integer and float operations
// in the same block order whatever R and T are, so a result never depends on the batch size,
// the tile shape or the row split.

#if defined(PETREL_CPU_QUANT_DOT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PETREL_CPU_QUANT_DOT_INL_H_
#undef PETREL_CPU_QUANT_DOT_INL_H_
#else
#define PETREL_CPU_QUANT_DOT_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/matmul/matmul_table.h"  // FindMatMulKernel, MatMulActivationType
#include "hwy/highway.h"
#include "quant/blocks.h"
#include "quant/f16.h"       // F16ToF32
#include "quant/quantize.h"  // DequantizeRow (HWY_SCALAR fallback)

// HWY_SCALAR has one lane per vector, too few for the pairwise byte products: it takes the
// dequantizing fallback at the end of this file (correct, slow; only CPUs without SSE4 use it).
#undef PETREL_QUANT_SIMD
#if HWY_TARGET == HWY_SCALAR
#define PETREL_QUANT_SIMD 0
#else
#define PETREL_QUANT_SIMD 1
#endif

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if PETREL_QUANT_SIMD
// One dot step is up to 32 int8 lanes (one AVX2 register; AVX3 uses the same 256-bit width
// because a 32-element block is the unit); SSE4 and EMU128 take two 16-lane vectors per block.
using QDI8 = hn::CappedTag<int8_t, 32>;
using QDU8 = hn::Repartition<uint8_t, QDI8>;
using QDI16 = hn::Repartition<int16_t, QDI8>;
using QDI32 = hn::Repartition<int32_t, QDI8>;
using QDF = hn::Repartition<float, QDI8>;
using QVI8 = hn::Vec<QDI8>;
using QVU8 = hn::Vec<QDU8>;
using QVI16 = hn::Vec<QDI16>;
using QVI32 = hn::Vec<QDI32>;
using QVecF = hn::Vec<QDF>;
static_assert(hn::MaxLanes(QDI8()) >= 16, "quantized kernels need at least 16 int8 lanes");
constexpr size_t kQVecs = quant::kQK / hn::MaxLanes(QDI8());  // vectors per 32 elements

// ---------------------------------------------------------------------------------------------
// The three integer primitives. x86 (SSSE3 and up) has them as single instructions, AArch64
// NEON as a few; elsewhere (SVE, EMU128) they are emulated lane by lane (correct, not fast).

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSE4
// Lane i: a[2i] * b[2i] + a[2i+1] * b[2i+1], a unsigned, b signed, saturated to int16 (our
// operands never saturate: |a| <= 128 with |b| <= 127, or a <= 63).
HWY_INLINE hn::Vec128<int16_t> MulPairsU8I8(hn::Vec128<uint8_t> a, hn::Vec128<int8_t> b) {
  return hn::Vec128<int16_t>{_mm_maddubs_epi16(a.raw, b.raw)};
}
// Lane i: a[2i] * b[2i] + a[2i+1] * b[2i+1] in int32.
HWY_INLINE hn::Vec128<int32_t> MulPairsI16(hn::Vec128<int16_t> a, hn::Vec128<int16_t> b) {
  return hn::Vec128<int32_t>{_mm_madd_epi16(a.raw, b.raw)};
}
// x * sign(s): x where s > 0, -x where s < 0, 0 where s == 0.
HWY_INLINE hn::Vec128<int8_t> ApplySign(hn::Vec128<int8_t> x, hn::Vec128<int8_t> s) {
  return hn::Vec128<int8_t>{_mm_sign_epi8(x.raw, s.raw)};
}
#if HWY_TARGET <= HWY_AVX2
HWY_INLINE hn::Vec256<int16_t> MulPairsU8I8(hn::Vec256<uint8_t> a, hn::Vec256<int8_t> b) {
  return hn::Vec256<int16_t>{_mm256_maddubs_epi16(a.raw, b.raw)};
}
HWY_INLINE hn::Vec256<int32_t> MulPairsI16(hn::Vec256<int16_t> a, hn::Vec256<int16_t> b) {
  return hn::Vec256<int32_t>{_mm256_madd_epi16(a.raw, b.raw)};
}
HWY_INLINE hn::Vec256<int8_t> ApplySign(hn::Vec256<int8_t> x, hn::Vec256<int8_t> s) {
  return hn::Vec256<int8_t>{_mm256_sign_epi8(x.raw, s.raw)};
}
#endif
#if HWY_TARGET <= HWY_AVX3
// 512-bit, for the rows-in-lanes driver's full vectors (quant_lanes-inl.h).
HWY_INLINE hn::Vec512<int16_t> MulPairsU8I8(hn::Vec512<uint8_t> a, hn::Vec512<int8_t> b) {
  return hn::Vec512<int16_t>{_mm512_maddubs_epi16(a.raw, b.raw)};
}
HWY_INLINE hn::Vec512<int32_t> MulPairsI16(hn::Vec512<int16_t> a, hn::Vec512<int16_t> b) {
  return hn::Vec512<int32_t>{_mm512_madd_epi16(a.raw, b.raw)};
}
// AVX-512 has no vpsignb: negate where s < 0 (-(-128) wraps to -128, as vpsignb's does), then
// zero where s == 0.
HWY_INLINE hn::Vec512<int8_t> ApplySign(hn::Vec512<int8_t> x, hn::Vec512<int8_t> s) {
  const __m512i negated =
      _mm512_mask_sub_epi8(x.raw, _mm512_movepi8_mask(s.raw), _mm512_setzero_si512(), x.raw);
  return hn::Vec512<int8_t>{_mm512_maskz_mov_epi8(_mm512_test_epi8_mask(s.raw, s.raw), negated)};
}
#endif
#elif HWY_TARGET == HWY_NEON && HWY_ARCH_ARM_A64
// AArch64 NEON has no pairwise u8 x i8 multiply-add (SDOT needs the dotprod extension and sums
// four products, not two): widen to int16, multiply (|a * b| <= 255 * 128 fits), then add the
// even and odd products with saturation, exactly what pmaddubsw computes.
HWY_INLINE hn::Vec128<int16_t> MulPairsU8I8(hn::Vec128<uint8_t> a, hn::Vec128<int8_t> b) {
  const int16x8_t lo =
      vmulq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(a.raw))), vmovl_s8(vget_low_s8(b.raw)));
  const int16x8_t hi = vmulq_s16(vreinterpretq_s16_u16(vmovl_high_u8(a.raw)), vmovl_high_s8(b.raw));
  return hn::Vec128<int16_t>(vqaddq_s16(vuzp1q_s16(lo, hi), vuzp2q_s16(lo, hi)));
}
// Lane i: a[2i] * b[2i] + a[2i+1] * b[2i+1] in int32 (pmaddwd).
HWY_INLINE hn::Vec128<int32_t> MulPairsI16(hn::Vec128<int16_t> a, hn::Vec128<int16_t> b) {
  const int32x4_t lo = vmull_s16(vget_low_s16(a.raw), vget_low_s16(b.raw));
  const int32x4_t hi = vmull_high_s16(a.raw, b.raw);
  return hn::Vec128<int32_t>(vpaddq_s32(lo, hi));
}
// x * sign(s): x where s > 0, -x where s < 0, 0 where s == 0.
HWY_INLINE hn::Vec128<int8_t> ApplySign(hn::Vec128<int8_t> x, hn::Vec128<int8_t> s) {
  const hn::Full128<int8_t> d;
  const auto zero = hn::Zero(d);
  return hn::IfThenZeroElse(hn::Eq(s, zero), hn::IfThenElse(hn::Lt(s, zero), hn::Neg(x), x));
}
#else
HWY_INLINE QVI16 MulPairsU8I8(QVU8 a, QVI8 b) {
  constexpr size_t kLanes = hn::MaxLanes(QDI8());
  HWY_ALIGN uint8_t av[kLanes];
  HWY_ALIGN int8_t bv[kLanes];
  HWY_ALIGN int16_t out[kLanes / 2];
  hn::Store(a, QDU8(), av);
  hn::Store(b, QDI8(), bv);
  for (size_t i = 0; i < kLanes / 2; ++i) {
    const int sum = av[2 * i] * bv[2 * i] + av[2 * i + 1] * bv[2 * i + 1];
    out[i] = int16_t(std::min(32767, std::max(-32768, sum)));
  }
  return hn::Load(QDI16(), out);
}
HWY_INLINE QVI32 MulPairsI16(QVI16 a, QVI16 b) {
  constexpr size_t kLanes = hn::MaxLanes(QDI16());
  HWY_ALIGN int16_t av[kLanes], bv[kLanes];
  HWY_ALIGN int32_t out[kLanes / 2];
  hn::Store(a, QDI16(), av);
  hn::Store(b, QDI16(), bv);
  for (size_t i = 0; i < kLanes / 2; ++i) {
    out[i] = int32_t(av[2 * i]) * bv[2 * i] + int32_t(av[2 * i + 1]) * bv[2 * i + 1];
  }
  return hn::Load(QDI32(), out);
}
HWY_INLINE QVI8 ApplySign(QVI8 x, QVI8 s) {
  const QDI8 d;
  const auto zero = hn::Zero(d);
  return hn::IfThenZeroElse(hn::Eq(s, zero), hn::IfThenElse(hn::Lt(s, zero), hn::Neg(x), x));
}
#endif

// The u8 x i8 dot of four bytes per int32 lane, added to `sum`: lane i += a[4i..4i+3] .
// b[4i..4i+3]. AVX3_DL (AVX512-VNNI) has it as one instruction, vpdpbusd; elsewhere it is
// pmaddubsw, pmaddwd against ones and an add, which computes the same int32 lanes wherever the
// int16 pair sums do not saturate, as no caller's operands do (see MulPairsU8I8). Kernels take
// the one-instruction shape where kHasDotQuads and keep their int16 pair sums elsewhere; both
// give the same exact integers, so every target's results stay bit-identical.
#if HWY_TARGET == HWY_AVX3_DL
constexpr bool kHasDotQuads = true;
// Inline assembly with the EVEX encoding spelled out: Highway 1.0.3 compiles AVX3_DL with
// "avxvnni" (not "avx512vnni") in its target options, under which GCC emits the VEX form of
// _mm256_dpbusd_epi32, which AVX-512 VNNI cores without AVX-VNNI (Ice Lake, Zen 4) lack; the
// EVEX form is what the run-time AVX3_DL check (CPUID AVX512_VNNI) guarantees.
HWY_INLINE hn::Vec256<int32_t> DotQuadsAdd(hn::Vec256<int32_t> sum, hn::Vec256<uint8_t> a,
                                           hn::Vec256<int8_t> b) {
  __m256i acc = sum.raw;
  asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a.raw), "v"(b.raw));
  return hn::Vec256<int32_t>{acc};
}
HWY_INLINE hn::Vec512<int32_t> DotQuadsAdd(hn::Vec512<int32_t> sum, hn::Vec512<uint8_t> a,
                                           hn::Vec512<int8_t> b) {
  __m512i acc = sum.raw;
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a.raw), "v"(b.raw));
  return hn::Vec512<int32_t>{acc};
}
#else
constexpr bool kHasDotQuads = false;
template <class VI32, class VU8, class VI8>
HWY_INLINE VI32 DotQuadsAdd(VI32 sum, VU8 a, VI8 b) {
  const hn::DFromV<VI32> d32;
  const hn::Repartition<int16_t, decltype(d32)> d16;
  return hn::Add(sum, MulPairsI16(MulPairsU8I8(a, b), hn::Set(d16, 1)));
}
#endif

#endif  // PETREL_QUANT_SIMD

// IEEE half to float. F16C where the target has it, else by moving the bits into place and
// rescaling by 2^112 (exact for normal and subnormal halves). Both are exact, so every target
// computes the same scale.
HWY_INLINE float HalfToF32(uint16_t bits) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return _cvtsh_ss(bits);
#else
  if ((bits & 0x7C00) == 0x7C00) return F16ToF32(bits);
  const uint32_t magnitude = uint32_t(bits & 0x7FFF) << 13;
  float value;
  std::memcpy(&value, &magnitude, sizeof(value));
  value *= 0x1p112f;
  return (bits & 0x8000) ? -value : value;
#endif
}

#if PETREL_QUANT_SIMD
// ---------------------------------------------------------------------------------------------
// Block decoders: 32 elements as kQVecs vectors.

// 16 packed bytes -> 32 unsigned levels: element j (j < 16) is the low nibble of qs[j], element
// j + 16 the high nibble.
HWY_INLINE void DecodeNibbles32(const uint8_t* HWY_RESTRICT qs, QVU8 (&u)[kQVecs]) {
  const QDU8 du8;
  const hn::Repartition<uint16_t, QDU8> du16;
  const auto mask = hn::Set(du8, 0x0F);
  if constexpr (kQVecs == 1) {
    const hn::Half<QDU8> dh;
    const hn::Repartition<uint16_t, decltype(dh)> dh16;
    const auto v = hn::LoadU(dh, qs);
    const auto hi = hn::BitCast(dh, hn::ShiftRight<4>(hn::BitCast(dh16, v)));
    u[0] = hn::And(hn::Combine(du8, hi, v), mask);
  } else {
    const auto v = hn::LoadU(du8, qs);
    u[0] = hn::And(v, mask);
    u[1] = hn::And(hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, v))), mask);
  }
}

// Adds 16 to element j where bit j of the 32-bit little-endian `qh` is set (Q5_0/Q5_1).
HWY_INLINE void AddFifthBits32(const uint8_t* HWY_RESTRICT qh, QVU8 (&u)[kQVecs]) {
  const QDU8 du8;
  const auto sixteen = hn::Set(du8, 0x10);
  constexpr size_t kLanes = hn::MaxLanes(QDU8());
  for (size_t v = 0; v < kQVecs; ++v) {
    u[v] = hn::Or(u[v], hn::IfThenElseZero(hn::LoadMaskBits(du8, qh + v * kLanes / 8), sixteen));
  }
}

// int32 lanes of sum(u * x) over 32 elements, u unsigned levels; with `kOffset`, the levels
// are u - kOffset (`xo` = MulPairsU8I8(kOffset, x), computed once per activation block).
template <int kOffset>
HWY_INLINE QVI32 DotUnsigned32(const QVU8 (&u)[kQVecs], const QVI8 (&x)[kQVecs],
                               const QVI16 (&xo)[kQVecs]) {
  const QDI16 d16;
  const auto ones = hn::Set(d16, 1);
  QVI32 sum = hn::Zero(QDI32());
  for (size_t v = 0; v < kQVecs; ++v) {
    auto p = MulPairsU8I8(u[v], x[v]);
    if constexpr (kOffset != 0) p = hn::Sub(p, xo[v]);
    sum = hn::Add(sum, MulPairsI16(p, ones));
  }
  return sum;
}

// int32 lanes of sum(w * x) over 32 elements, w signed (|w| <= 127 or w = -128).
HWY_INLINE QVI32 DotSigned32(const QVI8 (&w)[kQVecs], const QVI8 (&x)[kQVecs]) {
  const QDU8 du8;
  const auto ones = hn::Set(QDI16(), 1);
  QVI32 sum = hn::Zero(QDI32());
  for (size_t v = 0; v < kQVecs; ++v) {
    const auto p = MulPairsU8I8(hn::BitCast(du8, hn::Abs(w[v])), ApplySign(x[v], w[v]));
    sum = hn::Add(sum, MulPairsI16(p, ones));
  }
  return sum;
}

// ---------------------------------------------------------------------------------------------
// Block formats against 32-element activation blocks. A Format provides WBlock, XBlock
// (BlockQ8_0 or BlockQ8_1), kSigned, kOffset, kHasMin, and Decode(block, sub,
// Decoded32<kSigned>&), which fills the levels of the block's 32-element sub-block `sub`, d and
// m. A weight block holds kElems / 32 such sub-blocks sharing its scale (Q1_0: 4, Q2_0: 2); each
// meets its own activation block.

template <bool kSigned>
struct Decoded32 {
  using V = hn::Vec<std::conditional_t<kSigned, QDI8, QDU8>>;
  // User-provided: GCC gives an implicitly defined constructor the translation unit's default
  // target options, not the per-target pragma's, and then cannot inline the vectors' always_inline
  // constructors into it (an AArch64 build error: "target specific option mismatch").
  HWY_INLINE Decoded32() {}
  V q[kQVecs];
  float d;
  float m;
};

// Tile of R rows x T tokens over all blocks of a row: each weight block is decoded once (in
// registers) and used for T tokens; each activation block is loaded once and used for R rows.
template <class F, size_t R, size_t T>
HWY_INLINE void QuantTile32(const uint8_t* const* HWY_RESTRICT w_rows,
                            const uint8_t* const* HWY_RESTRICT x_rows, size_t n_blocks,
                            QVecF (&acc)[R][T], float (&acc_scalar)[R][T]) {
  using WBlock = typename F::WBlock;
  using XBlock = typename F::XBlock;
  const QDI8 d8;
  const QDF df;
  constexpr size_t kLanes = hn::MaxLanes(QDI8());
  constexpr size_t kSubBlocks = F::kElems / quant::kQK;
  static_assert(F::kElems % quant::kQK == 0, "a whole number of 32-element sub-blocks");
  for (size_t i = 0; i < n_blocks * kSubBlocks; ++i) {
    const size_t b = i / kSubBlocks, sub = i % kSubBlocks;
    Decoded32<F::kSigned> w[R];
    for (size_t r = 0; r < R; ++r) {
      F::Decode(reinterpret_cast<const WBlock*>(w_rows[r])[b], sub, w[r]);
    }
    for (size_t t = 0; t < T; ++t) {
      const XBlock& xb = reinterpret_cast<const XBlock*>(x_rows[t])[i];
      QVI8 x[kQVecs];
      QVI16 xo[kQVecs];
      for (size_t v = 0; v < kQVecs; ++v) {
        x[v] = hn::LoadU(d8, xb.qs + v * kLanes);
        if constexpr (F::kOffset != 0) {
          xo[v] = MulPairsU8I8(hn::Set(QDU8(), uint8_t(F::kOffset)), x[v]);
        }
      }
      const float dx = HalfToF32(xb.d);
      for (size_t r = 0; r < R; ++r) {
        QVI32 isum;
        if constexpr (F::kSigned) {
          isum = DotSigned32(w[r].q, x);
        } else {
          isum = DotUnsigned32<F::kOffset>(w[r].q, x, xo);
        }
        // The scale product is one float multiply wherever it is computed.
        acc[r][t] = hn::MulAdd(hn::ConvertTo(df, isum), hn::Set(df, w[r].d * dx), acc[r][t]);
        if constexpr (F::kHasMin) acc_scalar[r][t] += w[r].m * HalfToF32(xb.s);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 256-element super-block formats (K-quants, IQ4_XS) against Q8_K. A super-block is decoded
// once per tile into L1 (levels, per-chunk scale vectors, per-16 mins) and then dotted with the
// tile's tokens: Format::Decode(block, DecodedK&) with kSigned, kOffset, kHasMins.

struct DecodedK {
  HWY_ALIGN uint8_t q[quant::kQK_K];  // levels; int8 bit patterns when signed
  // Chunk c (elements 32c..32c+31) in int16 pair lanes: 8 x the scale of elements 32c..32c+15,
  // then 8 x that of 32c+16..32c+31.
  HWY_ALIGN int16_t scales[8][16];
  HWY_ALIGN int16_t mins[16];  // integer min (or offset x scale) per 16 elements
  float d;
  float dmin;
};

// The int16 pair-lane scale vector(s) of one 32-element chunk whose halves have scales s0, s1:
// built in registers (two half-width stores then a full-width load would stall store forwarding).
HWY_INLINE void ChunkScales16(int16_t s0, int16_t s1, QVI16 (&out)[kQVecs]) {
  const QDI16 d16;
  if constexpr (kQVecs == 1) {
    const hn::Half<QDI16> dh;
    out[0] = hn::Combine(d16, hn::Set(dh, s1), hn::Set(dh, s0));
  } else {
    out[0] = hn::Set(d16, s0);
    out[1] = hn::Set(d16, s1);
  }
}

// Calls body(std::integral_constant<size_t, i>()) for i in [0, kCount): compile-time lane
// indices for hn::Broadcast.
template <size_t kCount, class Body, size_t... kI>
HWY_INLINE void UnrollImpl(const Body& body, std::index_sequence<kI...>) {
  (body(std::integral_constant<size_t, kI>()), ...);
}
template <size_t kCount, class Body>
HWY_INLINE void Unroll(const Body& body) {
  UnrollImpl<kCount>(body, std::make_index_sequence<kCount>());
}

// 16 bytes (one 128-bit vector) zero-extended (u8) or sign-extended (i8) to 16 int16 lanes in
// kQVecs vectors. `du16` is Repartition<uint16_t, QDU8>, a parameter so that only the taken branch
// is instantiated.
template <class DU16, class V>
HWY_INLINE void PromoteBytes16(DU16 du16, V bytes, QVI16 (&out)[kQVecs]) {
  const QDI16 d16;
  if constexpr (hn::MaxLanes(DU16()) == 16) {
    out[0] = hn::BitCast(d16, hn::PromoteTo(du16, bytes));
  } else {
    const hn::Rebind<hn::TFromV<V>, DU16> d8;
    out[0] = hn::BitCast(d16, hn::PromoteTo(du16, hn::LowerHalf(d8, bytes)));
    out[1] = hn::BitCast(d16, hn::PromoteTo(du16, hn::UpperHalf(d8, bytes)));
  }
}

// scales[c] from one int16 scale per 16 elements.
HWY_INLINE void SetChunkScales16(const int16_t* HWY_RESTRICT scale16, DecodedK& w) {
  const QDI16 d16;
  constexpr size_t kLanes16 = hn::MaxLanes(QDI16());
  for (size_t c = 0; c < 8; ++c) {
    QVI16 v[kQVecs];
    ChunkScales16(scale16[2 * c], scale16[2 * c + 1], v);
    for (size_t i = 0; i < kQVecs; ++i) hn::Store(v[i], d16, w.scales[c] + i * kLanes16);
  }
}

// scales[c] from one int16 scale per 32 elements.
HWY_INLINE void SetChunkScales32(const int16_t* HWY_RESTRICT scale32, DecodedK& w) {
  const hn::CappedTag<int16_t, 16> d16;
  for (size_t c = 0; c < 8; ++c) {
    for (size_t i = 0; i < 16; i += hn::Lanes(d16)) {
      hn::StoreU(hn::Set(d16, scale32[c]), d16, w.scales[c] + i);
    }
  }
}

// sum(mins[k] * bsums[k]), k < 16.
HWY_INLINE int32_t MinSumK(const int16_t* HWY_RESTRICT mins, const int16_t* HWY_RESTRICT bsums) {
  const QDI16 d16;
  const QDI32 d32;
  constexpr size_t kLanes = hn::MaxLanes(QDI16());
  QVI32 sum = hn::Zero(d32);
  for (size_t i = 0; i < 16; i += kLanes) {
    sum = hn::Add(sum, MulPairsI16(hn::Load(d16, mins + i), hn::LoadU(d16, bsums + i)));
  }
  return hn::GetLane(hn::SumOfLanes(d32, sum));
}

// int32 lanes of sum over the super-block of scale * (level - kOffset) * x.
template <bool kSigned, int kOffset>
HWY_INLINE QVI32 DotK(const DecodedK& w, const int8_t* HWY_RESTRICT x,
                      const QVI16* HWY_RESTRICT xo) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (kSigned) {
    // Two chunks per 512-bit vector (chunk 2 j + 1's lanes in the high half, added to chunk
    // 2 j's at the end: the same int32 lanes). x is negated under a mask where the level is
    // negative; where it is 0, |level| = 0 zeroes the product as vpsignb's zero would.
    __m512i sum = _mm512_setzero_si512();
    for (size_t j = 0; j < 4; ++j) {
      const __m512i wv = _mm512_load_si512(w.q + 64 * j);
      const __m512i xv = _mm512_loadu_si512(x + 64 * j);
      const __m512i signed_x =
          _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(wv), _mm512_setzero_si512(), xv);
      const __m512i pairs = _mm512_maddubs_epi16(_mm512_abs_epi8(wv), signed_x);
      sum = _mm512_add_epi32(sum, _mm512_madd_epi16(pairs, _mm512_load_si512(w.scales[2 * j])));
    }
    (void)xo;
    return QVI32{_mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1))};
  }
#endif
  const QDU8 du8;
  const QDI8 d8;
  const QDI16 d16;
  constexpr size_t kLanes = hn::MaxLanes(QDI8());
  QVI32 sum0 = hn::Zero(QDI32()), sum1 = hn::Zero(QDI32());
  for (size_t c = 0; c < 8; ++c) {
    for (size_t v = 0; v < kQVecs; ++v) {
      const size_t i = 32 * c + v * kLanes;
      const auto xv = hn::LoadU(d8, x + i);
      QVI16 p;
      if constexpr (kSigned) {
        const auto wv = hn::BitCast(d8, hn::Load(du8, w.q + i));
        p = MulPairsU8I8(hn::BitCast(du8, hn::Abs(wv)), ApplySign(xv, wv));
      } else {
        p = MulPairsU8I8(hn::Load(du8, w.q + i), xv);
        if constexpr (kOffset != 0) p = hn::Sub(p, xo[c * kQVecs + v]);
      }
      const auto prod = MulPairsI16(p, hn::Load(d16, w.scales[c] + v * kLanes / 2));
      if (c % 2 == 0) {
        sum0 = hn::Add(sum0, prod);
      } else {
        sum1 = hn::Add(sum1, prod);
      }
    }
  }
  return hn::Add(sum0, sum1);
}

// Each super-block is decoded once per tile into DecodedK (L1) and dotted with the T tokens.
template <class F, size_t R, size_t T>
HWY_INLINE void QuantTileK(const uint8_t* const* HWY_RESTRICT w_rows,
                           const uint8_t* const* HWY_RESTRICT x_rows, size_t n_blocks,
                           QVecF (&acc)[R][T], float (&acc_scalar)[R][T]) {
  using WBlock = typename F::WBlock;
  using XBlock = quant::BlockQ8_K;
  const QDF df;
  const QDI8 d8;
  constexpr size_t kLanes = hn::MaxLanes(QDI8());
  if constexpr (requires(const WBlock& block, const int8_t* x) {
                  F::DotBlock(block, x);
                  F::Scale(block);
                }) {
    // The Format dots each block straight from its bytes: for single tokens (where decoding once
    // per tile buys nothing) with the int32 lanes and the float scale that Decode and DotK give a
    // token in a tile (see DotGridK), or for every token where kDotBlockAlways (a decode so cheap
    // that repeating it per token costs less than a round trip through L1).
    constexpr bool kAlways = requires { requires F::kDotBlockAlways; };
    if constexpr (T == 1 || kAlways) {
      static_assert(kAlways || (F::kSigned && F::kOffset == 0 && !F::kHasMins),
                    "Decode and DotK must give the lanes DotBlock gives");
      for (size_t b = 0; b < n_blocks; ++b) {
        for (size_t t = 0; t < T; ++t) {
          const XBlock& xb = reinterpret_cast<const XBlock*>(x_rows[t])[b];
          for (size_t r = 0; r < R; ++r) {
            const WBlock& block = reinterpret_cast<const WBlock*>(w_rows[r])[b];
            const QVI32 isum = F::DotBlock(block, xb.qs);
            acc[r][t] = hn::MulAdd(hn::ConvertTo(df, isum), hn::Set(df, F::Scale(block) * xb.d),
                                   acc[r][t]);
          }
        }
      }
      return;
    }
  }
  for (size_t b = 0; b < n_blocks; ++b) {
    const XBlock* xb[T];
    for (size_t t = 0; t < T; ++t) xb[t] = reinterpret_cast<const XBlock*>(x_rows[t]) + b;
    DecodedK w[R];
    for (size_t r = 0; r < R; ++r) {
      F::Decode(reinterpret_cast<const WBlock*>(w_rows[r])[b], w[r]);
    }
    for (size_t t = 0; t < T; ++t) {
      QVI16 xo[F::kOffset != 0 ? 8 * kQVecs : 1];
      if constexpr (F::kOffset != 0) {
        const auto offset = hn::Set(QDU8(), uint8_t(F::kOffset));
        for (size_t i = 0; i < 8 * kQVecs; ++i) {
          xo[i] = MulPairsU8I8(offset, hn::LoadU(d8, xb[t]->qs + i * kLanes));
        }
      }
      for (size_t r = 0; r < R; ++r) {
        const QVI32 isum = DotK<F::kSigned, F::kOffset>(w[r], xb[t]->qs, xo);
        acc[r][t] = hn::MulAdd(hn::ConvertTo(df, isum), hn::Set(df, w[r].d * xb[t]->d), acc[r][t]);
        if constexpr (F::kHasMins) {
          acc_scalar[r][t] -= w[r].dmin * xb[t]->d * float(MinSumK(w[r].mins, xb[t]->bsums));
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The driver.

// Rows row, row + row_step, ... (R of them) for tokens [token, token + T).
template <class F, size_t R, size_t T>
HWY_INLINE void QuantTile(const uint8_t* HWY_RESTRICT w, size_t w_row_bytes, size_t row,
                          const uint8_t* HWY_RESTRICT xq, size_t xq_row_bytes, size_t token,
                          size_t n_blocks, const float* HWY_RESTRICT bias, float* HWY_RESTRICT out,
                          size_t out_stride, size_t row_step = 1) {
  const QDF df;
  const uint8_t* w_rows[R];
  const uint8_t* x_rows[T];
  QVecF acc[R][T];
  float acc_scalar[R][T];
  for (size_t r = 0; r < R; ++r) w_rows[r] = w + (row + r * row_step) * w_row_bytes;
  for (size_t t = 0; t < T; ++t) x_rows[t] = xq + (token + t) * xq_row_bytes;
  for (size_t r = 0; r < R; ++r) {
    for (size_t t = 0; t < T; ++t) {
      acc[r][t] = hn::Zero(df);
      acc_scalar[r][t] = 0.0f;
    }
  }
  if constexpr (F::kElems != quant::kQK_K) {
    QuantTile32<F, R, T>(w_rows, x_rows, n_blocks, acc, acc_scalar);
  } else {
    QuantTileK<F, R, T>(w_rows, x_rows, n_blocks, acc, acc_scalar);
  }
  for (size_t t = 0; t < T; ++t) {
    for (size_t r = 0; r < R; ++r) {
      const float dot = hn::GetLane(hn::SumOfLanes(df, acc[r][t])) + acc_scalar[r][t];
      const size_t out_row = row + r * row_step;
      out[(token + t) * out_stride + out_row] = dot + (bias ? bias[out_row] : 0.0f);
    }
  }
}

// Rows [row, row + R) for tokens [t_begin, t_end) in tiles of T, then single tokens.
template <class F, size_t R, size_t T>
HWY_INLINE void QuantRowBlock(const uint8_t* w, size_t w_row_bytes, size_t row, const uint8_t* xq,
                              size_t xq_row_bytes, size_t t_begin, size_t t_end, size_t n_blocks,
                              const float* bias, float* out, size_t out_stride) {
  size_t t = t_begin;
  for (; t + T <= t_end; t += T) {
    QuantTile<F, R, T>(w, w_row_bytes, row, xq, xq_row_bytes, t, n_blocks, bias, out, out_stride);
  }
  for (; t < t_end; ++t) {
    QuantTile<F, R, 1>(w, w_row_bytes, row, xq, xq_row_bytes, t, n_blocks, bias, out, out_stride);
  }
}

// Tokens whose activation blocks stay in L2 while a thread streams its weight rows past them.
constexpr size_t kQuantTokenChunk = 64;

#endif  // PETREL_QUANT_SIMD

// The DType of an activation block struct (kCount for any other struct): a driver checks its
// Format's XBlock against the mat_mul table with it.
template <class XBlock>
constexpr DType ActivationBlockType() {
  if constexpr (std::is_same_v<XBlock, quant::BlockQ8_0>) {
    return DType::kQ8_0;
  } else if constexpr (std::is_same_v<XBlock, quant::BlockQ8_1>) {
    return DType::kQ8_1;
  } else if constexpr (std::is_same_v<XBlock, quant::BlockQ8_K>) {
    return DType::kQ8_K;
  } else {
    return DType::kCount;
  }
}

// HWY_SCALAR: each weight row and activation row dequantized exactly and dotted in double, with
// Q8_1's stored block sum for the min term (as the integer kernels use it).
template <class F>
HWY_NOINLINE void MatMulQuantScalar(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                                    size_t xq_row_bytes, size_t n_tokens, const float* bias,
                                    float* out, size_t out_stride, size_t row_begin,
                                    size_t row_end) {
  constexpr DType kActType = MatMulActivationType(F::kType);
  thread_local std::vector<float> w_row, x_row;  // (n_in) each
  w_row.resize(n_in);
  x_row.resize(n_in);
  for (size_t row = row_begin; row < row_end; ++row) {
    const uint8_t* w_bytes = static_cast<const uint8_t*>(w) + row * w_row_bytes;
    DequantizeRow(F::kType, w_bytes, w_row.data(), n_in);
    for (size_t t = 0; t < n_tokens; ++t) {
      const uint8_t* x_bytes = static_cast<const uint8_t*>(xq) + t * xq_row_bytes;
      DequantizeRow(kActType, x_bytes, x_row.data(), n_in);
      double sum = 0;
      for (size_t i = 0; i < n_in; ++i) sum += double(w_row[i]) * x_row[i];
      if constexpr (kActType == DType::kQ8_1) {
        // The min (the f16 after d in Q4_1/Q5_1) times s - sum(x) of each block.
        const auto* xb = reinterpret_cast<const quant::BlockQ8_1*>(x_bytes);
        for (size_t b = 0; b < n_in / quant::kQK; ++b) {
          uint16_t m_bits;
          std::memcpy(&m_bits, w_bytes + b * sizeof(typename F::WBlock) + 2, sizeof(m_bits));
          double x_sum = 0;
          for (size_t i = 0; i < quant::kQK; ++i) x_sum += x_row[b * quant::kQK + i];
          sum += double(F16ToF32(m_bits)) * (double(F16ToF32(xb[b].s)) - x_sum);
        }
      }
      out[t * out_stride + row] = float(sum) + (bias ? bias[row] : 0.0f);
    }
  }
}

// The traits the super-block formats on this driver share (Q2_K, Q3_K, the IQ1/IQ2/IQ3 and TQ
// formats, against Q8_K activations): unsigned levels with kOffset subtracted from each (or a
// min per sub-block when kHasMins), or signed levels; two decode rows per pass and 1 x 4 prompt
// tiles.
template <int kLevelOffset, bool kMins, bool kSignedLevels = false>
struct SuperBlockPairFormat {
  static constexpr size_t kElems = quant::kQK_K;
#if PETREL_QUANT_SIMD
  using XBlock = quant::BlockQ8_K;
  static constexpr bool kSigned = kSignedLevels;
  static constexpr int kOffset = kLevelOffset;
  static constexpr bool kHasMins = kMins;
  static constexpr size_t kDecodeRows = 2;  // see MatMulQuantImpl
  static constexpr size_t kTileRows = 1;
  static constexpr size_t kTileTokens = 4;
#endif
};

// The HostKernels::mat_mul_quantized contract for one weight format. Format also provides the
// tile shapes: kDecodeRows (rows per pass for one token) and kTileRows x kTileTokens.
template <class F>
HWY_INLINE void MatMulQuantImpl(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                                size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                                size_t out_stride, size_t row_begin, size_t row_end) {
  static_assert(FindMatMulKernel(F::kType)->driver == MatMulDriver::kPairPerBlock,
                "kMatMulKernels names another driver for this format");
#if !PETREL_QUANT_SIMD
  MatMulQuantScalar<F>(w, w_row_bytes, n_in, xq, xq_row_bytes, n_tokens, bias, out, out_stride,
                       row_begin, row_end);
#else
  static_assert(ActivationBlockType<typename F::XBlock>() == MatMulActivationType(F::kType),
                "the Format's activation blocks are not those kMatMulKernels names");
  const uint8_t* w_bytes = static_cast<const uint8_t*>(w);
  const uint8_t* x_bytes = static_cast<const uint8_t*>(xq);
  const size_t n_blocks = n_in / F::kElems;
  if (n_tokens == 1) {
    // Matrix-vector: memory-bound. Each pass takes kDecodeRows rows that are n_rows /
    // kDecodeRows apart, so the weight reads are that many long sequential streams, which the
    // hardware prefetcher follows at full bandwidth (adjacent rows per pass re-train it at every
    // row start: measured 2x slower from DRAM, and software prefetch did not recover it), while
    // each activation block is loaded once per pass.
    constexpr size_t kRows = F::kDecodeRows;
    const size_t row_step = (row_end - row_begin) / kRows;
    for (size_t i = 0; i < row_step; ++i) {
      QuantTile<F, kRows, 1>(w_bytes, w_row_bytes, row_begin + i, x_bytes, xq_row_bytes, 0,
                             n_blocks, bias, out, out_stride, row_step);
    }
    for (size_t row = row_begin + kRows * row_step; row < row_end; ++row) {
      QuantTile<F, 1, 1>(w_bytes, w_row_bytes, row, x_bytes, xq_row_bytes, 0, n_blocks, bias, out,
                         out_stride);
    }
    return;
  }
  for (size_t t0 = 0; t0 < n_tokens; t0 += kQuantTokenChunk) {
    const size_t t1 = std::min(n_tokens, t0 + kQuantTokenChunk);
    size_t row = row_begin;
    for (; row + F::kTileRows <= row_end; row += F::kTileRows) {
      QuantRowBlock<F, F::kTileRows, F::kTileTokens>(w_bytes, w_row_bytes, row, x_bytes,
                                                     xq_row_bytes, t0, t1, n_blocks, bias, out,
                                                     out_stride);
    }
    for (; row < row_end; ++row) {
      QuantRowBlock<F, 1, F::kTileTokens>(w_bytes, w_row_bytes, row, x_bytes, xq_row_bytes, t0, t1,
                                          n_blocks, bias, out, out_stride);
    }
  }
#endif  // PETREL_QUANT_SIMD
}

#if PETREL_QUANT_SIMD
// Tile shapes: accumulators (R x T vectors) plus the decoded rows and one activation block must
// fit the registers (16 on SSE4/AVX2, 32 on AVX-512).
#if HWY_TARGET <= HWY_AVX3
constexpr size_t kQuantTileRows32 = 4;
constexpr size_t kQuantTileTokens32 = 4;
#else
constexpr size_t kQuantTileRows32 = 3;
constexpr size_t kQuantTileTokens32 = 3;
#endif
#endif  // PETREL_QUANT_SIMD

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
