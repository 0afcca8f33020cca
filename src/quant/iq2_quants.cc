// IQ2_XXS, IQ2_XS and IQ2_S (2.06, 2.31 and 2.56 bits per weight): per 8 elements an index into an
// E8-lattice codebook of unsigned magnitudes, signs stored separately, and a 4-bit scale per 32
// (XXS) or 16 elements. Decoders only: writing these types needs an importance matrix.
#include <cstring>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/formats.h"
#include "quant/iq_grids.h"

namespace petrel::quant {
namespace {

// Writes the 8 grid magnitudes of `grid` times `scale`, negated where `signs` has a bit set.
// The product is formed before the sign is applied, as ggml does, so the bits match.
inline void SignedGroup8(uint64_t grid, uint8_t signs, float scale, float* dst /* (8) */) {
  for (size_t j = 0; j < 8; ++j) {
    const float value = scale * float((grid >> (8 * j)) & 0xFF);
    dst[j] = (signs >> j) & 1 ? -value : value;
  }
}

// The scale of a 4-bit sub-block scale `s` in the IQ2 formats: d * (s + 1/2) / 4.
inline float IQ2Scale(float d, uint32_t s) { return d * (0.5f + float(s)) * 0.25f; }

}  // namespace

void DequantizeIQ2_XXS(const void* src, float* dst, size_t n) {
  const BlockIQ2_XXS* blocks = static_cast<const BlockIQ2_XXS*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(blocks[i].d);
    for (size_t ib = 0; ib < kQK_K / 32; ++ib) {
      uint32_t words[2];  // four grid-index bytes; signs and scale
      std::memcpy(words, blocks[i].qs + 4 * ib, sizeof(words));
      const float db = IQ2Scale(d, words[1] >> 28);
      for (size_t l = 0; l < 4; ++l, dst += 8) {
        const uint32_t index = (words[0] >> (8 * l)) & 0xFF;
        SignedGroup8(kIQ2XXSGrid[index], IQ2Signs((words[1] >> (7 * l)) & 127), db, dst);
      }
    }
  }
}

void DequantizeIQ2_XS(const void* src, float* dst, size_t n) {
  const BlockIQ2_XS* blocks = static_cast<const BlockIQ2_XS*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(blocks[i].d);
    for (size_t ib = 0; ib < kQK_K / 32; ++ib) {
      const float db[2] = {IQ2Scale(d, blocks[i].scales[ib] & 0xF),
                           IQ2Scale(d, blocks[i].scales[ib] >> 4)};
      for (size_t l = 0; l < 4; ++l, dst += 8) {
        const uint16_t q = blocks[i].qs[4 * ib + l];
        SignedGroup8(kIQ2XSGrid[q & 511], IQ2Signs(q >> 9), db[l / 2], dst);
      }
    }
  }
}

void DequantizeIQ2_S(const void* src, float* dst, size_t n) {
  const BlockIQ2_S* blocks = static_cast<const BlockIQ2_S*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(blocks[i].d);
    const uint8_t* qs = blocks[i].qs;
    const uint8_t* signs = blocks[i].qs + kQK_K / 8;
    for (size_t ib = 0; ib < kQK_K / 32; ++ib, qs += 4, signs += 4) {
      const float db[2] = {IQ2Scale(d, blocks[i].scales[ib] & 0xF),
                           IQ2Scale(d, blocks[i].scales[ib] >> 4)};
      for (size_t l = 0; l < 4; ++l, dst += 8) {
        const uint32_t high = (uint32_t(blocks[i].qh[ib]) >> (2 * l)) & 3;
        SignedGroup8(kIQ2SGrid[qs[l] | (high << 8)], signs[l], db[l / 2], dst);
      }
    }
  }
}

}  // namespace petrel::quant
