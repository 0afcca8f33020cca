// Weight decoding: DECODE8(row, e, n, v) writes elements e .. e+7 of the weight row starting at
// byte `row` into v, as f32 (the same values as quant/*.cc's scalar dequantizers, bit for bit:
// the same products in the same order). `e` is a multiple of 8; every format keeps 8 such
// elements under one scale (and min), so each call decodes its scales once. Float rows may end
// inside the group: elements at `n` and past are 0.
//
// Included once per weight buffer: the includer defines the type (WEIGHT_F32, WEIGHT_Q4_K, ...),
// WORDS (the uint array of the weight buffer) and DECODE8 (the function's name), so one shader
// can decode two buffers (gated_ffn's gate and up). Layouts: quant/blocks.h (ggml's, byte for
// byte); bytes are read from uint words (common.glsl), so no 8/16-bit storage is needed.

#ifndef PETREL_DEQUANT_GLSL
#define PETREL_DEQUANT_GLSL
// IQ4_NL / IQ4_XS's non-linear grid (quant/blocks.h kIQ4NLValues).
const float kIQ4NLValues[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                         1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
int SignExtend8(uint b) { return bitfieldExtract(int(b), 0, 8); }
#endif

void DECODE8(uint row, uint e, uint n, out float v[8]) {
#define B(off) BYTE_AT(WORDS, (off))
#define H(off) U16_AT(WORDS, (off))
#if defined(WEIGHT_F32)
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    v[i] = e + i < n ? uintBitsToFloat(WORDS[(row >> 2) + e + i]) : 0.0;
  }
#elif defined(WEIGHT_F16)
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    v[i] = e + i < n ? HalfToFloat(H(row + 2u * (e + i))) : 0.0;
  }
#elif defined(WEIGHT_BF16)
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    v[i] = e + i < n ? Bf16ToFloat(H(row + 2u * (e + i))) : 0.0;
  }
#elif defined(WEIGHT_Q4_0) || defined(WEIGHT_IQ4_NL)
  // 18 bytes: d, then element j in the low nibble of qs[j], j + 16 in the high one.
  const uint base = row + (e / 32u) * 18u, j = e % 32u;
  const float d = HalfToFloat(H(base));
  const uint shift = j >= 16u ? 4u : 0u;
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    const uint q = (B(base + 2u + ((j + i) & 15u)) >> shift) & 15u;
#if defined(WEIGHT_Q4_0)
    v[i] = float(int(q) - 8) * d;
#else
    v[i] = d * kIQ4NLValues[q];
#endif
  }
#elif defined(WEIGHT_Q4_1)
  const uint base = row + (e / 32u) * 20u, j = e % 32u;
  const float d = HalfToFloat(H(base)), m = HalfToFloat(H(base + 2u));
  const uint shift = j >= 16u ? 4u : 0u;
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    v[i] = float((B(base + 4u + ((j + i) & 15u)) >> shift) & 15u) * d + m;
  }
#elif defined(WEIGHT_Q5_0)
  // 22 bytes: d, qh (bit j: the fifth bit of element j), qs as Q4_0.
  const uint base = row + (e / 32u) * 22u, j = e % 32u;
  const float d = HalfToFloat(H(base));
  const uint qh = U32_AT(WORDS, base + 2u);
  const uint shift = j >= 16u ? 4u : 0u;
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    const uint q = ((B(base + 6u + ((j + i) & 15u)) >> shift) & 15u) | (((qh >> (j + i)) & 1u) << 4);
    v[i] = float(int(q) - 16) * d;
  }
#elif defined(WEIGHT_Q5_1)
  const uint base = row + (e / 32u) * 24u, j = e % 32u;
  const float d = HalfToFloat(H(base)), m = HalfToFloat(H(base + 2u));
  const uint qh = WORDS[(base + 4u) >> 2];  // 4-aligned: blocks are 24 bytes, rows whole blocks
  const uint shift = j >= 16u ? 4u : 0u;
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    const uint q = ((B(base + 8u + ((j + i) & 15u)) >> shift) & 15u) | (((qh >> (j + i)) & 1u) << 4);
    v[i] = float(q) * d + m;
  }
#elif defined(WEIGHT_Q8_0)
  const uint base = row + (e / 32u) * 34u, j = e % 32u;
  const float d = HalfToFloat(H(base));
  [[unroll]] for (uint i = 0; i < 8u; ++i) v[i] = float(SignExtend8(B(base + 2u + j + i))) * d;
#elif defined(WEIGHT_Q2_K)
  // 84 bytes: scales[16] (4-bit scale, 4-bit min per 16 elements), qs[64], d, dmin. Each half
  // of 128 elements: 32 bytes, four 2-bit planes of 32 elements.
  const uint base = row + (e / 256u) * 84u, j = e % 256u;
  const float d = HalfToFloat(H(base + 80u)), dmin = HalfToFloat(H(base + 82u));
  const uint sc = B(base + j / 16u);
  const float dl = d * float(sc & 15u), ml = dmin * float(sc >> 4);
  const uint q = base + 16u + (j / 128u) * 32u + j % 32u, shift = ((j % 128u) / 32u) * 2u;
  [[unroll]] for (uint i = 0; i < 8u; ++i) v[i] = dl * float((B(q + i) >> shift) & 3u) - ml;
#elif defined(WEIGHT_Q3_K)
  // 110 bytes: hmask[32] (high bits, inverted), qs[64] (low 2 bits as Q2_K), scales[12]
  // (sixteen 6-bit scales, biased by 32), d.
  const uint base = row + (e / 256u) * 110u, j = e % 256u;
  const float d = HalfToFloat(H(base + 108u));
  const uint is = j / 16u;
  const uint low = is < 8u ? B(base + 96u + is) & 15u : B(base + 96u + is - 8u) >> 4;
  const uint high = (B(base + 104u + is % 4u) >> (2u * (is / 4u))) & 3u;
  const float dl = d * float(int(low | (high << 4)) - 32);
  const uint plane = (j % 128u) / 32u;
  const uint q = base + 32u + (j / 128u) * 32u + j % 32u, shift = plane * 2u;
  const uint hbit = (j / 128u) * 4u + plane;
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    const int lowq = int((B(q + i) >> shift) & 3u);
    const int highq = ((B(base + j % 32u + i) >> hbit) & 1u) != 0u ? 0 : 4;
    v[i] = dl * float(lowq - highq);
  }
#elif defined(WEIGHT_Q4_K) || defined(WEIGHT_Q5_K)
  // d, dmin, scales[12] (eight 6-bit scales and mins), [Q5_K: qh[32]], qs[128]: each 32 bytes of
  // qs hold 64 elements, sub-block 2k in the low nibbles, 2k + 1 in the high ones.
#if defined(WEIGHT_Q4_K)
  const uint block_bytes = 144u, qs = 16u;
#else
  const uint block_bytes = 176u, qs = 48u;
#endif
  const uint base = row + (e / 256u) * block_bytes, j = e % 256u;
  const float d = HalfToFloat(H(base)), dmin = HalfToFloat(H(base + 2u));
  const uint sub = j / 32u, s = base + 4u;
  uint sc, mn;
  if (sub < 4u) {
    sc = B(s + sub) & 63u;
    mn = B(s + sub + 4u) & 63u;
  } else {
    sc = (B(s + sub + 4u) & 15u) | ((B(s + sub - 4u) >> 6) << 4);
    mn = (B(s + sub + 4u) >> 4) | ((B(s + sub) >> 6) << 4);
  }
  const float dl = d * float(sc), ml = dmin * float(mn);
  const uint q = base + qs + (j / 64u) * 32u + j % 32u, shift = (sub & 1u) * 4u;
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
#if defined(WEIGHT_Q4_K)
    v[i] = dl * float((B(q + i) >> shift) & 15u) - ml;
#else
    const uint high = ((B(base + 16u + j % 32u + i) >> sub) & 1u) << 4;
    v[i] = dl * float(((B(q + i) >> shift) & 15u) + high) - ml;
#endif
  }
#elif defined(WEIGHT_Q6_K)
  // 210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8), d. Each half of
  // 128 elements: 64 bytes of ql, 32 of qh; quarter k of a half takes ql[l + 32 (k & 1)]'s
  // nibble k / 2 and qh[l]'s bits 2k, 2k + 1.
  const uint base = row + (e / 256u) * 210u, j = e % 256u;
  const float d = HalfToFloat(H(base + 208u));
  const float dl = d * float(SignExtend8(B(base + 192u + j / 16u)));
  const uint half_ = j / 128u, quarter = (j % 128u) / 32u, l = j % 32u;
  const uint ql = base + half_ * 64u + (quarter & 1u) * 32u + l, ql_shift = (quarter / 2u) * 4u;
  const uint qh = base + 128u + half_ * 32u + l, qh_shift = quarter * 2u;
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    const uint q = ((B(ql + i) >> ql_shift) & 15u) | (((B(qh + i) >> qh_shift) & 3u) << 4);
    v[i] = dl * float(int(q) - 32);
  }
#elif defined(WEIGHT_IQ4_XS)
  // 136 bytes: d, scales_h (2 high bits of eight 6-bit scales), scales_l[4] (4 low bits), then
  // per 32 elements 16 bytes of nibbles as IQ4_NL.
  const uint base = row + (e / 256u) * 136u, j = e % 256u;
  const float d = HalfToFloat(H(base));
  const uint ib = j / 32u;
  const uint low = (B(base + 4u + ib / 2u) >> (4u * (ib % 2u))) & 15u;
  const uint high = (H(base + 2u) >> (2u * ib)) & 3u;
  const float dl = d * float(int(low | (high << 4)) - 32);
  const uint q = base + 8u + ib * 16u + (j % 16u), shift = (j % 32u) >= 16u ? 4u : 0u;
  [[unroll]] for (uint i = 0; i < 8u; ++i) v[i] = dl * kIQ4NLValues[(B(q + i) >> shift) & 15u];
#else
#error "dequant.glsl: define the weight type (WEIGHT_F32, WEIGHT_Q4_0, ...)"
#endif
#undef B
#undef H
}
