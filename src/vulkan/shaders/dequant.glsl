// Weight decoding: DECODE8(row, e, n, v) writes elements e .. e+7 of the weight row starting at
// byte `row` into v, as f32 (the same values as quant/*.cc's scalar dequantizers, bit for bit:
// the same products in the same order). `e` is a multiple of 8; every format keeps 8 such
// elements under one scale (and min), so each call decodes its scales once. Float rows may end
// inside the group: elements at `n` and past are 0.
//
// Included once per weight buffer: the includer defines the type (WEIGHT_F32, WEIGHT_Q4_K, ...),
// WORDS (the uint array of the weight buffer) and DECODE8 (the function's name), so one shader
// can decode two buffers (gated_ffn's gate and up); it also declares `grids`, the IQ codebooks
// (below). Layouts: quant/blocks.h (ggml's, byte for byte); bytes are read from uint words
// (common.glsl), so no 8/16-bit storage is needed.

#ifndef PETREL_DEQUANT_GLSL
#define PETREL_DEQUANT_GLSL
// IQ4_NL / IQ4_XS's non-linear grid (quant/blocks.h kIQ4NLValues).
const float kIQ4NLValues[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                         1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
// MXFP4's E2M1 values, doubled (quant/blocks.h kMXFP4Values; the scale is halved to match).
const float kMXFP4Values[16] = float[16](0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0,
                                         -3.0, -4.0, -6.0, -8.0, -12.0);
int SignExtend8(uint b) { return bitfieldExtract(int(b), 0, 8); }
// The eight sign bits of IQ2/IQ3 (quant/iq_grids.h IQ2Signs): 7 stored, the eighth makes the
// count of negatives even.
uint IQ2Signs(uint seven_bits) { return seven_bits | ((bitCount(seven_bits) & 1u) << 7); }
float SignOf(uint signs, uint i) { return ((signs >> i) & 1u) != 0u ? -1.0 : 1.0; }
// The IQ codebooks (quant/iq_grids.h) are one storage buffer of uint words, `grids`, which the
// includer declares; these are the word offsets of each grid in it (ops_matmul.cc's
// WeightGridWords() lays them out in this order). A grid of 8-byte entries takes two words per
// entry, low half first; one of 4-byte entries one word.
const uint kIQ2XXSGrid = 0u;     // 256 entries of 8 bytes
const uint kIQ2XSGrid = 512u;    // 512 of 8
const uint kIQ2SGrid = 1536u;    // 1024 of 8
const uint kIQ3XXSGrid = 3584u;  // 256 of 4
const uint kIQ3SGrid = 3840u;    // 512 of 4
const uint kIQ1SGrid = 4352u;    // 2048 of 8 (int8 levels), to word 8448
// Byte i of entry `index` of the 8-byte grid at word `grid`.
#define GRID8_BYTE(grid, index, i) ((grids[(grid) + 2u * (index) + ((i) >> 2)] >> (((i) & 3u) * 8u)) & 0xFFu)
// Byte i of entry `index` of the 4-byte grid at word `grid`.
#define GRID4_BYTE(grid, index, i) ((grids[(grid) + (index)] >> ((i) * 8u)) & 0xFFu)
// IQ1's shift of every grid level (quant/iq_grids.h kIQ1Delta).
const float kIQ1Delta = 0.125;
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
#elif defined(WEIGHT_IQ2_XXS)
  // 66 bytes: d, then per 32 elements two uint32: four 8-bit grid indices, then four 7-bit sign
  // groups and a 4-bit scale.
  const uint base = row + (e / 256u) * 66u, j = e % 256u;
  const float d = HalfToFloat(H(base));
  const uint ib = j / 32u, l = (j % 32u) / 8u, aux = base + 2u + 8u * ib;
  const uint indices = U32_AT(WORDS, aux), scale_signs = U32_AT(WORDS, aux + 4u);
  const float db = d * (0.5 + float(scale_signs >> 28)) * 0.25;
  const uint index = (indices >> (8u * l)) & 255u;
  const uint signs = IQ2Signs((scale_signs >> (7u * l)) & 127u);
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    v[i] = db * float(GRID8_BYTE(kIQ2XXSGrid, index, i)) * SignOf(signs, i);
  }
#elif defined(WEIGHT_IQ2_XS)
  // 74 bytes: d, qs[32] (uint16 per 8 elements: 9-bit grid index, 7 sign bits), scales[8] (a
  // 4-bit scale per 16 elements).
  const uint base = row + (e / 256u) * 74u, j = e % 256u;
  const float d = HalfToFloat(H(base));
  const uint ib = j / 32u, l = (j % 32u) / 8u;
  const uint q = H(base + 2u + 2u * (4u * ib + l));
  const uint sc = (B(base + 66u + ib) >> (4u * (l / 2u))) & 15u;
  const float db = d * (0.5 + float(sc)) * 0.25;
  const uint index = q & 511u, signs = IQ2Signs(q >> 9);
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    v[i] = db * float(GRID8_BYTE(kIQ2XSGrid, index, i)) * SignOf(signs, i);
  }
#elif defined(WEIGHT_IQ2_S)
  // 82 bytes: d, qs[32] (low grid-index bytes), signs[32] (8 sign bits per 8 elements), qh[8]
  // (2 high index bits per 8 elements), scales[8] (a 4-bit scale per 16 elements).
  const uint base = row + (e / 256u) * 82u, j = e % 256u;
  const float d = HalfToFloat(H(base));
  const uint ib = j / 32u, l = (j % 32u) / 8u;
  const uint sc = (B(base + 74u + ib) >> (4u * (l / 2u))) & 15u;
  const float db = d * (0.5 + float(sc)) * 0.25;
  const uint index = B(base + 2u + 4u * ib + l) | ((B(base + 66u + ib) << (8u - 2u * l)) & 0x300u);
  const uint signs = B(base + 34u + 4u * ib + l);
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    v[i] = db * float(GRID8_BYTE(kIQ2SGrid, index, i)) * SignOf(signs, i);
  }
#elif defined(WEIGHT_IQ3_XXS)
  // 98 bytes: d, qs[64] (grid indices, 4 elements each), then per 32 elements a uint32 of four
  // 7-bit sign groups and a 4-bit scale.
  const uint base = row + (e / 256u) * 98u, j = e % 256u;
  const float d = HalfToFloat(H(base));
  const uint ib = j / 32u, l = (j % 32u) / 8u;
  const uint scale_signs = U32_AT(WORDS, base + 66u + 4u * ib);
  const float db = d * (0.5 + float(scale_signs >> 28)) * 0.5;
  const uint signs = IQ2Signs((scale_signs >> (7u * l)) & 127u);
  const uint index1 = B(base + 2u + 8u * ib + 2u * l), index2 = B(base + 3u + 8u * ib + 2u * l);
  [[unroll]] for (uint i = 0; i < 4u; ++i) {
    v[i] = db * float(GRID4_BYTE(kIQ3XXSGrid, index1, i)) * SignOf(signs, i);
    v[i + 4u] = db * float(GRID4_BYTE(kIQ3XXSGrid, index2, i)) * SignOf(signs, i + 4u);
  }
#elif defined(WEIGHT_IQ3_S)
  // 110 bytes: d, qs[64] (low bytes of 9-bit grid indices), qh[8] (their ninth bits, one byte
  // per 32 elements), signs[32] (one bit per element), scales[4] (a 4-bit scale per 32).
  const uint base = row + (e / 256u) * 110u, j = e % 256u;
  const float d = HalfToFloat(H(base));
  const uint ib = j / 32u, l = (j % 32u) / 8u;
  const uint sc = (B(base + 106u + ib / 2u) >> (4u * (ib % 2u))) & 15u;
  const float db = d * float(1u + 2u * sc);
  const uint qh = B(base + 66u + ib), qs = base + 2u + 8u * ib + 2u * l;
  const uint index1 = B(qs) | ((qh << (8u - 2u * l)) & 256u);
  const uint index2 = B(qs + 1u) | ((qh << (7u - 2u * l)) & 256u);
  const uint signs = B(base + 74u + 4u * ib + l);
  [[unroll]] for (uint i = 0; i < 4u; ++i) {
    v[i] = db * float(GRID4_BYTE(kIQ3SGrid, index1, i)) * SignOf(signs, i);
    v[i + 4u] = db * float(GRID4_BYTE(kIQ3SGrid, index2, i)) * SignOf(signs, i + 4u);
  }
#elif defined(WEIGHT_IQ1_S)
  // 50 bytes: d, qs[32] (low 8 bits of 11-bit grid indices), qh[8] (uint16 per 32 elements:
  // 3 high index bits per 8, a 3-bit scale, the delta's sign).
  const uint base = row + (e / 256u) * 50u, j = e % 256u;
  const float d = HalfToFloat(H(base));
  const uint ib = j / 32u, l = (j % 32u) / 8u;
  const uint qh = H(base + 34u + 2u * ib);
  const float dl = d * float(2u * ((qh >> 12) & 7u) + 1u);
  const float delta = (qh & 0x8000u) != 0u ? -kIQ1Delta : kIQ1Delta;
  const uint index = B(base + 2u + 4u * ib + l) | (((qh >> (3u * l)) & 7u) << 8);
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    v[i] = dl * (float(SignExtend8(GRID8_BYTE(kIQ1SGrid, index, i))) + delta);
  }
#elif defined(WEIGHT_IQ1_M)
  // 56 bytes: qs[32] (low index bytes), qh[16] (per 8 elements a nibble: 3 high index bits and
  // the delta's sign), scales[8] (four uint16: 3-bit scales per 16 elements, and in their top
  // nibbles the f16 super-block scale).
  const uint base = row + (e / 256u) * 56u, j = e % 256u;
  const uint sc0 = H(base + 48u), sc1 = H(base + 50u), sc2 = H(base + 52u), sc3 = H(base + 54u);
  const float d = HalfToFloat((sc0 >> 12) | ((sc1 >> 8) & 0xF0u) | ((sc2 >> 4) & 0xF00u) |
                              (sc3 & 0xF000u));
  const uint ib = j / 32u, l = (j % 32u) / 8u;
  const uint sc = H(base + 48u + 2u * (ib / 2u));
  const float dl = d * float(2u * ((sc >> (6u * (ib % 2u) + 3u * (l / 2u))) & 7u) + 1u);
  const uint qh = B(base + 32u + 2u * ib + l / 2u) >> (4u * (l % 2u));
  const uint index = B(base + 4u * ib + l) | ((qh & 7u) << 8);
  const float delta = (qh & 8u) != 0u ? -kIQ1Delta : kIQ1Delta;
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    v[i] = dl * (float(SignExtend8(GRID8_BYTE(kIQ1SGrid, index, i))) + delta);
  }
#elif defined(WEIGHT_TQ1_0)
  // 54 bytes: qs[48] and qh[4] of base-3 digits (digit n of byte b: (b * 3^n mod 256) * 3 >> 8),
  // then d. Elements 0..159: digit j / 32 of qs[j % 32]; 160..239: digit k / 16 of
  // qs[32 + k % 16] (k = j - 160); 240..255: digit k / 4 of qh[k % 4] (k = j - 240).
  const uint base = row + (e / 256u) * 54u, j0 = e % 256u;
  const float d = HalfToFloat(H(base + 52u));
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    const uint j = j0 + i;
    uint byte_off, digit;
    if (j < 160u) {
      byte_off = j % 32u;
      digit = j / 32u;
    } else if (j < 240u) {
      byte_off = 32u + (j - 160u) % 16u;
      digit = (j - 160u) / 16u;
    } else {
      byte_off = 48u + (j - 240u) % 4u;
      digit = (j - 240u) / 4u;
    }
    const uint pow3 = digit == 0u ? 1u : digit == 1u ? 3u : digit == 2u ? 9u : digit == 3u ? 27u : 81u;
    const uint q = (B(base + byte_off) * pow3) & 255u;
    v[i] = float(int((q * 3u) >> 8) - 1) * d;
  }
#elif defined(WEIGHT_TQ2_0)
  // 66 bytes: qs[64] (each 32 bytes hold 128 elements: element 32k + m in bits 2k of byte m),
  // then d. Levels are the 2-bit value minus 1.
  const uint base = row + (e / 256u) * 66u, j = e % 256u;
  const float d = HalfToFloat(H(base + 64u));
  const uint q = base + (j / 128u) * 32u + j % 32u, shift = ((j % 128u) / 32u) * 2u;
  [[unroll]] for (uint i = 0; i < 8u; ++i) v[i] = float(int((B(q + i) >> shift) & 3u) - 1) * d;
#elif defined(WEIGHT_MXFP4)
  // 17 bytes: an E8M0 exponent, then nibbles as Q4_0 indexing kMXFP4Values. The scale is
  // 2^(e - 128) (half the E8M0 value, matching the doubled values), a denormal for e < 2.
  const uint base = row + (e / 32u) * 17u, j = e % 32u;
  const uint x = B(base);
  const float d = uintBitsToFloat(x < 2u ? 0x00200000u << x : (x - 1u) << 23);
  const uint shift = j >= 16u ? 4u : 0u;
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    v[i] = kMXFP4Values[(B(base + 1u + ((j + i) & 15u)) >> shift) & 15u] * d;
  }
#elif defined(WEIGHT_Q1_0)
  // 18 bytes per 128 elements: d, then one bit per element (set: +d, clear: -d).
  const uint base = row + (e / 128u) * 18u, j = e % 128u;
  const float d = HalfToFloat(H(base));
  const uint bits = B(base + 2u + j / 8u);
  [[unroll]] for (uint i = 0; i < 8u; ++i) v[i] = ((bits >> i) & 1u) != 0u ? d : -d;
#elif defined(WEIGHT_Q2_0)
  // 18 bytes per 64 elements: d, then 2 bits per element, four to a byte (level - 1) * d.
  const uint base = row + (e / 64u) * 18u, j = e % 64u;
  const float d = HalfToFloat(H(base));
  [[unroll]] for (uint i = 0; i < 8u; ++i) {
    v[i] = float(int((B(base + 2u + (j + i) / 4u) >> (2u * ((j + i) % 4u))) & 3u) - 1) * d;
  }
#else
#error "dequant.glsl: define the weight type (WEIGHT_F32, WEIGHT_Q4_0, ...)"
#endif
#undef B
#undef H
}
