// IQ1_S and IQ1_M (1.56 and 1.75 bits per weight): per 8 elements an 11-bit index into a codebook
// of levels -1, 0, +1, shifted by +-kIQ1Delta per group, times 3-bit odd sub-block scales.
// Decoders only: writing these types needs an importance matrix.
#include <cstring>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/formats.h"
#include "quant/iq_grids.h"

namespace petrel::quant {
namespace {

// Writes (level + delta) * scale for the 8 signed levels of `grid`, in ggml's order of operations.
inline void ShiftedGroup8(uint64_t grid, float delta, float scale, float* dst /* (8) */) {
  for (size_t j = 0; j < 8; ++j) {
    const int8_t level = int8_t(uint8_t((grid >> (8 * j)) & 0xFF));
    dst[j] = scale * (float(level) + delta);
  }
}

}  // namespace

void DequantizeIQ1_S(const void* src, float* dst, size_t n) {
  const BlockIQ1_S* blocks = static_cast<const BlockIQ1_S*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float d = F16ToF32(blocks[i].d);
    const uint8_t* qs = blocks[i].qs;
    for (size_t ib = 0; ib < kQK_K / 32; ++ib, qs += 4) {
      const uint32_t qh = blocks[i].qh[ib];
      const float dl = d * float(2 * int((qh >> 12) & 7) + 1);
      const float delta = qh & 0x8000 ? -kIQ1Delta : kIQ1Delta;
      for (size_t l = 0; l < 4; ++l, dst += 8) {
        const uint32_t index = qs[l] | (((qh >> (3 * l)) & 7) << 8);
        ShiftedGroup8(kIQ1SGrid[index], delta, dl, dst);
      }
    }
  }
}

void DequantizeIQ1_M(const void* src, float* dst, size_t n) {
  const BlockIQ1_M* blocks = static_cast<const BlockIQ1_M*>(src);
  for (size_t i = 0; i < n / kQK_K; ++i) {
    uint16_t sc[4];  // the scales bytes as little-endian uint16
    std::memcpy(sc, blocks[i].scales, sizeof(sc));
    // The f16 super-block scale is spread over the top nibbles of the four words.
    const uint16_t d_bits = uint16_t((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                     ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
    const float d = F16ToF32(d_bits);
    const uint8_t* qs = blocks[i].qs;
    const uint8_t* qh = blocks[i].qh;
    for (size_t ib = 0; ib < kQK_K / 32; ++ib, qs += 4, qh += 2) {
      const uint32_t scale_word = uint32_t(sc[ib / 2]) >> (6 * (ib % 2));
      const float dl[2] = {d * float(2 * int(scale_word & 7) + 1),
                           d * float(2 * int((scale_word >> 3) & 7) + 1)};
      for (size_t l = 0; l < 4; ++l, dst += 8) {
        // Group l's high index bits and delta sign: low or high nibble of qh[l / 2].
        const uint32_t nibble = (uint32_t(qh[l / 2]) >> (4 * (l % 2))) & 0xF;
        const uint32_t index = qs[l] | ((nibble & 7) << 8);
        const float delta = nibble & 8 ? -kIQ1Delta : kIQ1Delta;
        ShiftedGroup8(kIQ1SGrid[index], delta, dl[l / 2], dst);
      }
    }
  }
}

}  // namespace petrel::quant
