// Per-target integer dot products of quantized weight blocks with 8-bit activation blocks, and the
// mat_mul driver every per-format TU (matmul_q4_0.cc, ...) instantiates with its block decoder.
//
// Scheme (as ggml's CPU backend): the activation row is quantized once per op and token to Q8_0,
// Q8_1 or Q8_K; a weight block is decoded to int16 levels already multiplied by its integer
// sub-block scale (every format's level x scale fits int16), multiplied with the int8
// activations into int32 lane sums, and scaled by the two float block scales into an f32 vector
// accumulator. Min terms (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) go into a scalar accumulator through
// the activation block sums. A row's result depends only on its blocks and the token's
// activation blocks, in a fixed order: the same in any batch and any thread split.

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

#include "hwy/highway.h"
#include "quant/blocks.h"
#include "quant/f16.h"  // F16ToF32 (inf/NaN scales only)

HWY_BEFORE_NAMESPACE();
namespace petrel::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// int16 lanes of one dot step; capped at 32 so a 32-element block is a whole number of steps.
using QD16 = hn::CappedTag<int16_t, 32>;
using QD32 = hn::Repartition<int32_t, QD16>;
using QDF = hn::Repartition<float, QD16>;
using QVecF = hn::Vec<QDF>;

// IEEE half to float by moving the bits into place and rescaling by 2^112: exact for normal and
// subnormal halves, a few instructions instead of the generic branchy conversion.
HWY_INLINE float HalfToF32(uint16_t bits) {
  if ((bits & 0x7C00) == 0x7C00) return F16ToF32(bits);
  const uint32_t magnitude = uint32_t(bits & 0x7FFF) << 13;
  float value;
  std::memcpy(&value, &magnitude, sizeof(value));
  value *= 0x1p112f;
  return (bits & 0x8000) ? -value : value;
}

// int32 lane sums of w[i] * x[i], i in [0, count); count is 32 or 256.
HWY_INLINE hn::Vec<QD32> DotI16I8(const int16_t* HWY_RESTRICT w, const int8_t* HWY_RESTRICT x,
                                  size_t count) {
  const QD16 d16;
  const QD32 d32;
  const hn::Rebind<int8_t, QD16> d8;
  auto sum0 = hn::Zero(d32), sum1 = hn::Zero(d32);
  for (size_t i = 0; i < count; i += hn::Lanes(d16)) {
    const auto xv = hn::PromoteTo(d16, hn::LoadU(d8, x + i));
    sum0 = hn::ReorderWidenMulAccumulate(d32, hn::LoadU(d16, w + i), xv, sum0, sum1);
  }
  return hn::Add(sum0, sum1);
}

// acc += float(isum lanes) * scale.
HWY_INLINE void AccumulateScaled(hn::Vec<QD32> isum, float scale, QVecF& acc) {
  const QDF df;
  acc = hn::MulAdd(hn::ConvertTo(df, isum), hn::Set(df, scale), acc);
}

// 16 packed bytes -> low nibbles (elements 0..15) and high nibbles (16..31), minus `offset`.
HWY_INLINE void UnpackNibbles(const uint8_t* HWY_RESTRICT qs, int16_t offset,
                              int16_t* HWY_RESTRICT low, int16_t* HWY_RESTRICT high) {
  const hn::CappedTag<int16_t, 16> d16;
  const hn::Rebind<uint8_t, decltype(d16)> d8;
  const auto mask = hn::Set(d16, 0x0F), off = hn::Set(d16, offset);
  for (size_t i = 0; i < 16; i += hn::Lanes(d16)) {
    const auto v = hn::PromoteTo(d16, hn::LoadU(d8, qs + i));
    hn::StoreU(hn::Sub(hn::And(v, mask), off), d16, low + i);
    hn::StoreU(hn::Sub(hn::ShiftRight<4>(v), off), d16, high + i);
  }
}

// q[i] *= scale for i in [0, count), count a multiple of 16.
HWY_INLINE void ScaleLevels(int16_t* HWY_RESTRICT q, size_t count, int16_t scale) {
  const hn::CappedTag<int16_t, 16> d16;
  const auto s = hn::Set(d16, scale);
  for (size_t i = 0; i < count; i += hn::Lanes(d16)) {
    hn::StoreU(hn::Mul(hn::LoadU(d16, q + i), s), d16, q + i);
  }
}

// Adds the fifth bit of each of 32 levels (bit j of `qh` for element j) and subtracts `offset`.
HWY_INLINE void AddHighBits32(uint32_t qh, int16_t offset, int16_t* HWY_RESTRICT q) {
  for (size_t j = 0; j < 32; ++j) q[j] = int16_t((q[j] | (((qh >> j) & 1) << 4)) - offset);
}

// The mat_mul driver. `Format` provides WBlock, XBlock, kElems, Unpacked, Unpack and Dot:
// Unpack decodes one weight block, Dot adds its product with one activation block to a token's
// vector and scalar accumulators. Tokens go in tiles of 4 so each weight block is decoded once
// per tile.
template <class Format>
HWY_INLINE void MatMulQuantImpl(const void* w, size_t w_row_bytes, size_t n_in, const void* xq,
                                size_t xq_row_bytes, size_t n_tokens, const float* bias, float* out,
                                size_t out_stride, size_t row_begin, size_t row_end) {
  using WBlock = typename Format::WBlock;
  using XBlock = typename Format::XBlock;
  constexpr size_t kTile = 4;
  const QDF df;
  const size_t n_blocks = n_in / Format::kElems;
  typename Format::Unpacked unpacked;
  for (size_t row = row_begin; row < row_end; ++row) {
    const WBlock* w_blocks =
        reinterpret_cast<const WBlock*>(static_cast<const char*>(w) + row * w_row_bytes);
    for (size_t t0 = 0; t0 < n_tokens; t0 += kTile) {
      const size_t tile = std::min(kTile, n_tokens - t0);
      const XBlock* x_blocks[kTile];
      QVecF acc[kTile];
      float acc_scalar[kTile];
      for (size_t j = 0; j < kTile; ++j) {
        x_blocks[j] = reinterpret_cast<const XBlock*>(static_cast<const char*>(xq) +
                                                      (t0 + std::min(j, tile - 1)) * xq_row_bytes);
        acc[j] = hn::Zero(df);
        acc_scalar[j] = 0.0f;
      }
      for (size_t b = 0; b < n_blocks; ++b) {
        Format::Unpack(w_blocks[b], unpacked);
        for (size_t j = 0; j < tile; ++j)
          Format::Dot(unpacked, x_blocks[j][b], acc[j], acc_scalar[j]);
      }
      for (size_t j = 0; j < tile; ++j) {
        const float dot = hn::GetLane(hn::SumOfLanes(df, acc[j])) + acc_scalar[j];
        out[(t0 + j) * out_stride + row] = dot + (bias ? bias[row] : 0.0f);
      }
    }
  }
}

// Decoded 32-element block: int16 levels, scale, and (formats with a min) the min.
struct Unpacked32 {
  HWY_ALIGN int16_t q[quant::kQK];
  float d;
  float m;
};

// Decoded 256-element super-block: scaled int16 levels, d, dmin and the integer min of each
// 16 elements (zero for formats without mins).
struct Unpacked256 {
  HWY_ALIGN int16_t q[quant::kQK_K];
  float d;
  float dmin;
  int16_t mins[quant::kQK_K / 16];
};

// Dot of a 32-block with a Q8_0 block (no min).
HWY_INLINE void DotQ8_0Block(const Unpacked32& w, const quant::BlockQ8_0& x, QVecF& acc) {
  AccumulateScaled(DotI16I8(w.q, x.qs, quant::kQK), w.d * HalfToF32(x.d), acc);
}

// Dot of a 32-block with a min against a Q8_1 block: d_w d_x sum(q_w q_x) + m_w s_x.
HWY_INLINE void DotQ8_1Block(const Unpacked32& w, const quant::BlockQ8_1& x, QVecF& acc,
                             float& acc_scalar) {
  AccumulateScaled(DotI16I8(w.q, x.qs, quant::kQK), w.d * HalfToF32(x.d), acc);
  acc_scalar += w.m * HalfToF32(x.s);
}

// Dot of a super-block with a Q8_K block: d d_x sum(q_w q_x) - dmin d_x sum(min_k bsum_k).
HWY_INLINE void DotQ8_KBlock(const Unpacked256& w, const quant::BlockQ8_K& x, QVecF& acc,
                             float& acc_scalar, bool has_mins) {
  AccumulateScaled(DotI16I8(w.q, x.qs, quant::kQK_K), w.d * x.d, acc);
  if (has_mins) {
    int32_t min_sum = 0;
    for (size_t k = 0; k < quant::kQK_K / 16; ++k) min_sum += int32_t(w.mins[k]) * x.bsums[k];
    acc_scalar -= w.dmin * x.d * float(min_sum);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace petrel::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
