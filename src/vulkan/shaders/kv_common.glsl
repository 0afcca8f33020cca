// KV cache element formats, matching the host's exactly (quant/f16.cc, quant/legacy_quants.cc),
// so a row written here is the same bytes the CPU backend would write:
// - F16: round to nearest even, overflow to inf, NaN kept quiet.
// - Q8_0: blocks of 32 values as {f16 d; int8 qs[32]} (34 bytes), d = amax / 127,
//   qs = roundf(x * (1 / d)), halves away from zero.
// Vulkan lets division be 2.5 ulp off and leaves conversion rounding to the driver, so both
// are done here by exact means: integer bit work, and a division corrected by its residual.
#ifndef PETREL_KV_COMMON_GLSL
#define PETREL_KV_COMMON_GLSL

uint F32ToF16Bits(float value) {
  const uint bits = floatBitsToUint(value);
  const uint sign = (bits >> 16) & 0x8000u;
  const uint abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits >= 0x7F800000u) return sign | 0x7C00u | (abs_bits > 0x7F800000u ? 0x200u : 0u);
  if (abs_bits >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520: overflow
  if (abs_bits < 0x38800000u) {
    // Subnormal or zero: the f16 mantissa is value * 2^24 rounded to nearest even.
    const uint exponent = abs_bits >> 23;
    if (exponent < 102u) return sign;  // below 2^-25: rounds to zero
    const uint mantissa = (abs_bits & 0x7FFFFFu) | 0x800000u;
    const uint shift = 126u - exponent;  // 14 .. 24
    uint half_value = mantissa >> shift;
    const uint rest = mantissa & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (half_value & 1u) != 0u)) ++half_value;
    return sign | half_value;
  }
  const uint exponent = (abs_bits >> 23) - 112u;
  uint half_value = (exponent << 10) | ((abs_bits >> 13) & 0x3FFu);
  const uint rest = abs_bits & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (half_value & 1u) != 0u)) ++half_value;
  return sign | half_value;
}

// a - c * b, exactly up to the last subtraction's rounding (Dekker's product, no fma), for
// positive normal floats with c close to a / b.
float DivisionResidual(float a, float b, float c) {
  precise float tc = 4097.0 * c;
  precise float c_hi = tc - (tc - c);
  precise float c_lo = c - c_hi;
  precise float tb = 4097.0 * b;
  precise float b_hi = tb - (tb - b);
  precise float b_lo = b - b_hi;
  precise float product = c * b;
  precise float error = ((c_hi * b_hi - product) + c_hi * b_lo + c_lo * b_hi) + c_lo * b_lo;
  precise float residual = (a - product) - error;
  return residual;
}

// a / b rounded to nearest, as IEEE division does, for positive normal a and b (no quotient
// of theirs is a tie: see the callers). The driver's quotient is at most a few ulp off; the
// neighbour with the smallest residual is the right one.
float DivideRounded(float a, float b) {
  precise float q = a / b;
  if (q == 0.0 || isinf(q)) return q;
  for (int step = 0; step < 3; ++step) {
    const float down = uintBitsToFloat(floatBitsToUint(q) - 1u);
    const float up = uintBitsToFloat(floatBitsToUint(q) + 1u);
    const float r = abs(DivisionResidual(a, b, q));
    if (abs(DivisionResidual(a, b, down)) < r) {
      q = down;
    } else if (abs(DivisionResidual(a, b, up)) < r) {
      q = up;
    } else {
      break;
    }
  }
  return q;
}

// roundf: halves away from zero.
float RoundHalfAway(float x) {
  const float magnitude = abs(x);
  float whole = trunc(magnitude);
  if (magnitude - whole >= 0.5) whole += 1.0;
  return x < 0.0 ? -whole : whole;
}

#endif
