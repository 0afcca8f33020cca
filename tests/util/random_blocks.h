// Random blocks of the CUDA block types (cuda/matmul/blocks.cuh's Weight structs): random bytes
// with valid, non-zero scales, for the decoders' host tests and for device tests of types that
// have no plain quantizer (the IQ1-IQ3 codebook formats).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "cuda/matmul/blocks.cuh"  // VisitBlockType, the Weight structs
#include "quant/blocks.h"          // BlockIQ1_M
#include "quant/f16.h"             // F32ToF16
#include "quant/types.h"           // DType

namespace petrel::cuda {

// A random non-zero f16 scale of magnitude 2^-12 .. 2^-2 (either sign when `signed_scale`): small
// enough that no product overflows, varied enough to exercise the f16 exponent.
inline uint16_t RandomScale(std::mt19937& rng, bool signed_scale) {
  std::uniform_real_distribution<float> exponent(-12.f, -2.f);
  float value = std::exp2(exponent(rng));
  if (signed_scale && (rng() & 1)) value = -value;
  return F32ToF16(value);
}

// IQ1_M keeps its f16 scale in the top nibbles of its four little-endian uint16 `scales`.
inline void SetIQ1MScale(quant::BlockIQ1_M* block, uint16_t scale) {
  for (int k = 0; k < 4; ++k) {
    uint8_t& high_byte = block->scales[2 * k + 1];
    high_byte = uint8_t((high_byte & 0x0F) | (((scale >> (4 * k)) & 0xF) << 4));
  }
}

// A block of random bytes with valid, non-zero scales.
template <class Weight>
typename Weight::Block RandomBlock(std::mt19937& rng) {
  typename Weight::Block block;
  auto* bytes = reinterpret_cast<uint8_t*>(&block);
  for (size_t i = 0; i < sizeof(block); ++i) bytes[i] = uint8_t(rng());
  if constexpr (requires { block.d; }) block.d = RandomScale(rng, /*signed_scale=*/true);
  if constexpr (requires { block.dmin; }) block.dmin = RandomScale(rng, /*signed_scale=*/false);
  if constexpr (requires { block.m; }) block.m = RandomScale(rng, /*signed_scale=*/true);
  if constexpr (Weight::kType == DType::kIQ1_M) {
    SetIQ1MScale(&block, RandomScale(rng, /*signed_scale=*/true));
  }
  // MXFP4's scale is 2^(e - 128) with its values doubled: 2^-13 .. 2^-1 here.
  if constexpr (Weight::kType == DType::kMXFP4) block.e = uint8_t(115 + rng() % 13);
  return block;
}

// Fills `n_blocks` blocks of `type` at `dst` with random blocks; false if `type` is not a block
// type of the CUDA kernels.
inline bool FillRandomBlocks(DType type, std::mt19937& rng, void* dst, size_t n_blocks) {
  return VisitBlockType(type, [&](auto weight) {
    using Weight = decltype(weight);
    auto* bytes = static_cast<uint8_t*>(dst);
    for (size_t i = 0; i < n_blocks; ++i) {
      const typename Weight::Block block = RandomBlock<Weight>(rng);
      std::memcpy(bytes + i * sizeof(block), &block, sizeof(block));
    }
  });
}

}  // namespace petrel::cuda
