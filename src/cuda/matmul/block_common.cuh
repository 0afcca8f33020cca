// What every block decoder of blocks.cuh shares, on host and device: the 8-bit activation blocks
// the dot products read, and the scalar helpers (f16/bf16 conversion, unfused products, word
// loads, dp4a, packed small lookup tables, byte-wise signs). No CUDA header is needed by the host
// compiler.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cuda/kernels_common.cuh"  // PETREL_HD

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif
#if !defined(__CUDA_ARCH__)
#include "quant/f16.h"  // F16ToF32, BF16ToF32: the host's ground truth
#endif

namespace petrel::cuda {

constexpr int kSubBlockElems = 32;

// 32 activations quantized to 8 bits: x[j] ~ d * qs[j]; `s` = d * sum(qs), which folds the
// offset of the formats with a min (Q4_1, Q5_1, K-quants) or a bias (Q4_0: -8) into one product.
// 40 bytes, so the int8 values of every block in an array are 4-byte aligned for word loads.
struct ActivationBlock {
  float d;
  float s;
  int8_t qs[kSubBlockElems];
};
static_assert(sizeof(ActivationBlock) == 40);

// ---- Scalars shared by host and device ----

PETREL_HD float HalfToFloat(uint16_t bits) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(bits));
#else
  return F16ToF32(bits);
#endif
}

PETREL_HD float BFloat16ToFloat(uint16_t bits) {
#if defined(__CUDA_ARCH__)
  return __bfloat162float(__ushort_as_bfloat16(bits));
#else
  return BF16ToF32(bits);
#endif
}

// a * b rounded on its own: keeps `a * b + c` from being fused into an FMA on the device, which
// would round differently from the host dequantizers.
PETREL_HD float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// Four bytes at `p`, little-endian. Every field read this way sits at an even offset of its block
// and blocks have even sizes, so on the device two 16-bit loads are always aligned.
PETREL_HD uint32_t Load32(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  const uint16_t* halves = reinterpret_cast<const uint16_t*>(p);
  return uint32_t(halves[0]) | (uint32_t(halves[1]) << 16);
#else
  uint32_t word;
  std::memcpy(&word, p, sizeof(word));
  return word;
#endif
}

// Activations j..j+3 of a block (j a multiple of 4) as one word.
PETREL_HD int ActivationWord(const ActivationBlock& act, int j) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const int*>(act.qs + j);
#else
  int word;
  std::memcpy(&word, act.qs + j, sizeof(word));
  return word;
#endif
}

// acc + the dot product of the four signed bytes of a and b.
PETREL_HD int Dp4a(int a, int b, int acc) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, acc);
#else
  for (int i = 0; i < 4; ++i)
    acc += int(int8_t(uint32_t(a) >> (8 * i))) * int(int8_t(uint32_t(b) >> (8 * i)));
  return acc;
#endif
}

// Sum of the 16 activations j..j+15 (j a multiple of 4).
PETREL_HD int ActivationSum16(const ActivationBlock& act, int j) {
  int sum = 0;
  for (int w = 0; w < 4; ++w) sum = Dp4a(0x01010101, ActivationWord(act, j + 4 * w), sum);
  return sum;
}

// Quantizes 32 activations: d = max|x| / 127, qs = round-half-even(x / d) (all zero when x is),
// s = d * sum(qs). The device kernel (quantize_activations.cu) computes the same values with warp
// reductions; max and integer sums are exact, so the two agree bit for bit.
PETREL_HD void QuantizeActivationBlock(const float* x /* (32) */, ActivationBlock* out) {
  float amax = 0.f;
  for (int j = 0; j < kSubBlockElems; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = amax / 127.f;
  const float inv_d = d != 0.f ? 1.f / d : 0.f;
  int sum = 0;
  for (int j = 0; j < kSubBlockElems; ++j) {
    const int q = int(rintf(x[j] * inv_d));
    out->qs[j] = int8_t(q);
    sum += q;
  }
  out->d = d;
  out->s = d * float(sum);
}

// Sum of the 32 activations of a block.
PETREL_HD int ActivationSum32(const ActivationBlock& act) {
  return ActivationSum16(act, 0) + ActivationSum16(act, 16);
}

// Four bytes at `p`, little-endian, read a byte at a time: for fields at odd offsets (MXFP4's
// 17-byte blocks), where Load32's 16-bit loads would be misaligned on the device.
PETREL_HD uint32_t Load32Bytes(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

PETREL_HD float BitsToFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
#endif
}

// Entry `index` (0..15) of a table of 16 int8 values packed into two words (entries 0-7 in
// kLow, 8-15 in kHigh, the first in the lowest byte), so that host and device read small grids
// (IQ4_NL, MXFP4) without a table in device memory.
template <uint64_t kLow, uint64_t kHigh>
PETREL_HD int PackedNibbleValue(int index) {
  return int8_t(((index < 8 ? kLow : kHigh) >> (8 * (index & 7))) & 0xFF);
}

// Four nibbles (the low ones of `word`'s bytes, after `shift`) mapped through a packed table,
// as four int8 in one word for Dp4a.
template <uint64_t kLow, uint64_t kHigh>
PETREL_HD int PackedNibbleWord(uint32_t word, int shift) {
  uint32_t packed = 0;
  for (int i = 0; i < 4; ++i) {
    const int index = (word >> (8 * i + shift)) & 0xF;
    packed |= uint32_t(uint8_t(PackedNibbleValue<kLow, kHigh>(index))) << (8 * i);
  }
  return int(packed);
}

// The low four bits of `bits` (the first in bit 0) as four bytes 0 or 1.
PETREL_HD uint32_t SpreadBits(uint32_t bits) {
  return (bits & 1u) | ((bits & 2u) << 7) | ((bits & 4u) << 14) | ((bits & 8u) << 21);
}

// The low four bits of `bits` as four bytes 0x00 or 0xFF.
PETREL_HD uint32_t ByteMask(uint32_t bits) { return SpreadBits(bits) * 0xFFu; }

// The four signed bytes of `bytes`, negated where the bytes of `mask` are 0xFF (and kept where
// they are 0): (b ^ m) - m per byte.
PETREL_HD int NegateBytes(uint32_t bytes, uint32_t mask) {
#if defined(__CUDA_ARCH__)
  return int(__vsub4(bytes ^ mask, mask));
#else
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t b = (bytes >> (8 * i)) & 0xFF, m = (mask >> (8 * i)) & 0xFF;
    out |= (((b ^ m) - m) & 0xFF) << (8 * i);
  }
  return int(out);
#endif
}

}  // namespace petrel::cuda
