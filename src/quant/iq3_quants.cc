// IQ3_XXS and IQ3_S (3.06 and 3.44 bits per weight): per 4 elements an index into a codebook of
// unsigned magnitudes, signs per 8 elements, and a 4-bit scale per 32 elements. Decoders only;
// the quantizers (a grid search weighted by an importance matrix) live elsewhere.
#include <cstring>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/formats.h"
#include "quant/iq_grids.h"

namespace petrel::quant {
namespace {

// Writes the 4 grid magnitudes of `grid` times `scale`, negated where bit `first_sign + j` of
// `signs` is set. The product is formed before the sign is applied, as ggml does.
inline void SignedGroup4(uint32_t grid, uint8_t signs, size_t first_sign, float scale,
                         float* dst /* (4) */) {
  for (size_t j = 0; j < 4; ++j) {
    const float value = scale * float((grid >> (8 * j)) & 0xFF);
    dst[j] = (signs >> (first_sign + j)) & 1 ? -value : value;
  }
}

}  // namespace

void DequantizeIQ3_XXS(const void* src, float* dst, size_t n) {
  const BlockIQ3_XXS* blocks = static_cast<const BlockIQ3_XXS*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(blocks[i].d);
    const uint8_t* qs = blocks[i].qs;
    const uint8_t* signs_and_scales = blocks[i].qs + kQK_K / 4;
    for (size_t ib = 0; ib < kQK_K / 32; ++ib, qs += 8) {
      uint32_t word;  // four 7-bit sign groups, then the 4-bit scale
      std::memcpy(&word, signs_and_scales + 4 * ib, sizeof(word));
      const float db = d * (0.5f + float(word >> 28)) * 0.5f;
      for (size_t l = 0; l < 4; ++l, dst += 8) {
        const uint8_t signs = IQ2Signs((word >> (7 * l)) & 127);
        SignedGroup4(kIQ3XXSGrid[qs[2 * l]], signs, 0, db, dst);
        SignedGroup4(kIQ3XXSGrid[qs[2 * l + 1]], signs, 4, db, dst + 4);
      }
    }
  }
}

void DequantizeIQ3_S(const void* src, float* dst, size_t n) {
  const BlockIQ3_S* blocks = static_cast<const BlockIQ3_S*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(blocks[i].d);
    const uint8_t* qs = blocks[i].qs;
    const uint8_t* signs = blocks[i].signs;
    for (size_t ib = 0; ib < kQK_K / 32; ++ib, qs += 8, signs += 4) {
      const uint32_t scale_bits = (blocks[i].scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
      const float db = d * float(1 + 2 * int(scale_bits));
      const uint32_t high = blocks[i].qh[ib];  // ninth index bit of each of the 8 groups of 4
      for (size_t l = 0; l < 4; ++l, dst += 8) {
        const uint32_t index0 = qs[2 * l] | (((high >> (2 * l)) & 1) << 8);
        const uint32_t index1 = qs[2 * l + 1] | (((high >> (2 * l + 1)) & 1) << 8);
        SignedGroup4(kIQ3SGrid[index0], signs[l], 0, db, dst);
        SignedGroup4(kIQ3SGrid[index1], signs[l], 4, db, dst + 4);
      }
    }
  }
}

}  // namespace petrel::quant
