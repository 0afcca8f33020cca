// The codebooks of the GGUF IQ1, IQ2 and IQ3 weight formats. Each entry packs the levels of one
// group, one byte per element, lowest element in the lowest byte: 8 unsigned magnitudes (IQ2),
// 4 unsigned magnitudes (IQ3), or 8 signed levels -1, 0, +1 as int8 (IQ1). They are part of the
// file format (a block stores indices into them), so these values are fixed. The values are in
// iq_grid_values/, one file per table, which the CUDA decoders include for their device tables.
#include "quant/iq_grids.h"

namespace petrel::quant {

const uint64_t kIQ2XXSGrid[256] = {
#include "quant/iq_grid_values/iq2_xxs.inc"
};

const uint64_t kIQ2XSGrid[512] = {
#include "quant/iq_grid_values/iq2_xs.inc"
};

const uint64_t kIQ2SGrid[1024] = {
#include "quant/iq_grid_values/iq2_s.inc"
};

const uint32_t kIQ3XXSGrid[256] = {
#include "quant/iq_grid_values/iq3_xxs.inc"
};

const uint32_t kIQ3SGrid[512] = {
#include "quant/iq_grid_values/iq3_s.inc"
};

const uint64_t kIQ1SGrid[2048] = {
#include "quant/iq_grid_values/iq1_s.inc"
};

}  // namespace petrel::quant
