// Weight rows for the kernel tests: a type's own quantizer on N(0, 1) values where it has one,
// else random valid blocks (random bytes with a sane scale) for the types that can only be
// decoded (the IQ1/IQ2 grids, whose search needs an importance matrix).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "quant/blocks.h"
#include "quant/f16.h"       // F32ToF16
#include "quant/quantize.h"  // CanQuantize, QuantizeRow
#include "quant/types.h"     // Traits

namespace petrel::test {

// Where a block keeps its scale, for random blocks: an f16 at `offset`, an E8M0 exponent byte at
// `offset`, or IQ1_M's f16 spread over the top nibbles of its four uint16 scales.
enum class ScaleKind : uint8_t { kF16, kE8M0, kIQ1M };
struct RandomBlockScale {
  DType type;
  ScaleKind kind;
  size_t offset;
};
inline constexpr RandomBlockScale kRandomBlockScales[] = {
    {DType::kIQ1_S, ScaleKind::kF16, offsetof(quant::BlockIQ1_S, d)},
    {DType::kIQ1_M, ScaleKind::kIQ1M, offsetof(quant::BlockIQ1_M, scales)},
    {DType::kIQ2_XXS, ScaleKind::kF16, offsetof(quant::BlockIQ2_XXS, d)},
    {DType::kIQ2_XS, ScaleKind::kF16, offsetof(quant::BlockIQ2_XS, d)},
    {DType::kIQ2_S, ScaleKind::kF16, offsetof(quant::BlockIQ2_S, d)},
    {DType::kIQ3_XXS, ScaleKind::kF16, offsetof(quant::BlockIQ3_XXS, d)},
    {DType::kIQ3_S, ScaleKind::kF16, offsetof(quant::BlockIQ3_S, d)},
    {DType::kTQ1_0, ScaleKind::kF16, offsetof(quant::BlockTQ1_0, d)},
    {DType::kTQ2_0, ScaleKind::kF16, offsetof(quant::BlockTQ2_0, d)},
    {DType::kMXFP4, ScaleKind::kE8M0, offsetof(quant::BlockMXFP4, e)},
    {DType::kQ1_0, ScaleKind::kF16, offsetof(quant::BlockQ1_0, d)},
    {DType::kQ2_0, ScaleKind::kF16, offsetof(quant::BlockQ2_0, d)},
};

inline const RandomBlockScale* FindRandomBlockScale(DType type) {
  for (const RandomBlockScale& scale : kRandomBlockScales) {
    if (scale.type == type) return &scale;
  }
  return nullptr;
}

// Whether the tests can make rows of `type`: by its quantizer or as random blocks.
inline bool CanMakeWeightRows(DType type) {
  return CanQuantize(type) || FindRandomBlockScale(type) != nullptr;
}

// `n` elements (whole blocks) of random valid blocks of `type` at `dst`: every byte random, then
// each block's scale set to about 1/16 (f16 scales, positive or negative) or 2^-4..2^3 (E8M0),
// so that every bit pattern of the levels is exercised at a finite, moderate size.
inline bool RandomBlocks(DType type, size_t n, std::mt19937& rng, void* dst) {
  const RandomBlockScale* scale = FindRandomBlockScale(type);
  const DTypeTraits& traits = Traits(type);
  if (scale == nullptr || n % traits.block_elems != 0) return false;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> magnitude(0.03f, 0.09f);
  std::uniform_int_distribution<int> exponent(124, 131);
  auto* bytes = static_cast<uint8_t*>(dst);
  for (size_t b = 0; b < n / traits.block_elems; ++b) {
    uint8_t* block = bytes + b * traits.block_bytes;
    for (size_t i = 0; i < traits.block_bytes; ++i) block[i] = uint8_t(byte(rng));
    const float d = (byte(rng) & 1 ? -1.0f : 1.0f) * magnitude(rng);
    const uint16_t d_bits = F32ToF16(d);
    switch (scale->kind) {
      case ScaleKind::kF16:
        std::memcpy(block + scale->offset, &d_bits, sizeof(d_bits));
        break;
      case ScaleKind::kE8M0:
        block[scale->offset] = uint8_t(exponent(rng));
        break;
      case ScaleKind::kIQ1M: {
        uint16_t sc[4];
        std::memcpy(sc, block + scale->offset, sizeof(sc));
        for (size_t i = 0; i < 4; ++i) {
          sc[i] = uint16_t((sc[i] & 0x0FFF) | (((d_bits >> (4 * i)) & 0xF) << 12));
        }
        std::memcpy(block + scale->offset, sc, sizeof(sc));
        break;
      }
    }
  }
  return true;
}

// One row of `n` elements of `type` at `dst`: QuantizeRow of N(0, 1) values where the type has
// a quantizer, else RandomBlocks.
inline bool RandomWeightRow(DType type, size_t n, std::mt19937& rng, void* dst) {
  if (!CanQuantize(type)) return RandomBlocks(type, n, rng, dst);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n);
  for (float& v : values) v = normal(rng);
  return QuantizeRow(type, values.data(), dst, n);
}

}  // namespace petrel::test
