// The codebooks of IQ2_XXS, IQ2_S, IQ3_XXS and IQ3_S as level-number codes, the tables the AVX3_DL
// kernels look them up in (quant_grid_vbmi-inl.h).
//
// Plain code outside the per-target namespaces, so that it is compiled for the baseline: the
// tables are made at start-up on every CPU, and a maker compiled with AVX-512 options could use
// instructions a CPU without them lacks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/iq_grids.h"  // the grids, IQ2Signs

namespace petrel::cpu {

// A codebook of up to 1024 entries as level numbers: entry i's element k has level
// levels[(code >> (bits k)) & (2^bits - 1)], its code's low byte code_low[i] and high byte
// code_high[i]; `signs` holds quant::IQ2Signs of every 7-bit sign group (a `vpermi2b` table).
struct GridCodeTables {
  alignas(64) uint8_t code_low[1024];
  alignas(64) uint8_t code_high[1024];
  alignas(64) uint8_t levels[64];  // level number n & (2^bits - 1) at byte n (a `vpermb` table)
  alignas(64) uint8_t signs[128];
};

// The tables of a codebook of `entries` entries of `entry_bytes` unsigned bytes (little-endian in
// `grid`), whose distinct byte values number at most 2^bits and whose code fits 16 bits.
inline GridCodeTables MakeGridCodeTables(const uint8_t* grid, size_t entries, size_t entry_bytes,
                                         size_t bits) {
  GridCodeTables tables{};
  std::vector<uint8_t> distinct;
  for (size_t i = 0; i < entries * entry_bytes; ++i) {
    if (std::find(distinct.begin(), distinct.end(), grid[i]) == distinct.end()) {
      distinct.push_back(grid[i]);
    }
  }
  std::sort(distinct.begin(), distinct.end());
  const size_t level_mask = (size_t{1} << bits) - 1;
  if (distinct.size() > level_mask + 1 || entry_bytes * bits > 16 || entries > 1024) {
    return tables;  // never: the grids are fixed (and all-zero tables fail every parity test)
  }
  for (size_t n = 0; n < 64; ++n) {
    tables.levels[n] = (n & level_mask) < distinct.size() ? distinct[n & level_mask] : 0;
  }
  for (size_t i = 0; i < entries; ++i) {
    uint32_t code = 0;
    for (size_t k = 0; k < entry_bytes; ++k) {
      const auto level = std::find(distinct.begin(), distinct.end(), grid[i * entry_bytes + k]);
      code |= uint32_t(level - distinct.begin()) << (bits * k);
    }
    tables.code_low[i] = uint8_t(code);
    tables.code_high[i] = uint8_t(code >> 8);
  }
  for (uint32_t i = 0; i < 128; ++i) tables.signs[i] = quant::IQ2Signs(i);
  return tables;
}

inline const GridCodeTables kIQ2XXSCodes = MakeGridCodeTables(
    reinterpret_cast<const uint8_t*>(quant::kIQ2XXSGrid), 256, sizeof(quant::kIQ2XXSGrid[0]), 2);
inline const GridCodeTables kIQ2SCodes = MakeGridCodeTables(
    reinterpret_cast<const uint8_t*>(quant::kIQ2SGrid), 1024, sizeof(quant::kIQ2SGrid[0]), 2);
inline const GridCodeTables kIQ3XXSCodes = MakeGridCodeTables(
    reinterpret_cast<const uint8_t*>(quant::kIQ3XXSGrid), 256, sizeof(quant::kIQ3XXSGrid[0]), 3);
inline const GridCodeTables kIQ3SCodes = MakeGridCodeTables(
    reinterpret_cast<const uint8_t*>(quant::kIQ3SGrid), 512, sizeof(quant::kIQ3SGrid[0]), 3);

}  // namespace petrel::cpu
