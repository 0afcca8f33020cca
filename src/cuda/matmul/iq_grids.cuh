// The IQ1/IQ2/IQ3 codebooks as the block decoders (iq_blocks.cuh) read them: on the host the
// quant layer's tables (quant/iq_grids.h), on the device copies made from the same values
// (quant/iq_grid_values/), so that the two cannot differ.
//
// Each device table is a static local of its accessor: nvcc keeps every namespace-scope
// __device__ array of a file in that file's module, used or not, and every matmul kernel file
// includes blocks.cuh, while a function's static is emitted only where the function is used (by
// the kernels that decode its type). The tables are in global memory, read through the read-only
// cache, not __constant__: the lanes of a warp read different entries, which the constant cache
// would serialize. 33 KiB in all.
#pragma once

#include <cstdint>

#include "cuda/kernels_common.cuh"  // PETREL_HD
#include "quant/iq_grids.h"         // the host tables

namespace petrel::cuda {

PETREL_HD uint64_t IQ2XXSGrid(int index) {
#if defined(__CUDA_ARCH__)
  static const uint64_t kTable[256] = {
#include "quant/iq_grid_values/iq2_xxs.inc"
  };
  return kTable[index];
#else
  return quant::kIQ2XXSGrid[index];
#endif
}

PETREL_HD uint64_t IQ2XSGrid(int index) {
#if defined(__CUDA_ARCH__)
  static const uint64_t kTable[512] = {
#include "quant/iq_grid_values/iq2_xs.inc"
  };
  return kTable[index];
#else
  return quant::kIQ2XSGrid[index];
#endif
}

PETREL_HD uint64_t IQ2SGrid(int index) {
#if defined(__CUDA_ARCH__)
  static const uint64_t kTable[1024] = {
#include "quant/iq_grid_values/iq2_s.inc"
  };
  return kTable[index];
#else
  return quant::kIQ2SGrid[index];
#endif
}

PETREL_HD uint32_t IQ3XXSGrid(int index) {
#if defined(__CUDA_ARCH__)
  static const uint32_t kTable[256] = {
#include "quant/iq_grid_values/iq3_xxs.inc"
  };
  return kTable[index];
#else
  return quant::kIQ3XXSGrid[index];
#endif
}

PETREL_HD uint32_t IQ3SGrid(int index) {
#if defined(__CUDA_ARCH__)
  static const uint32_t kTable[512] = {
#include "quant/iq_grid_values/iq3_s.inc"
  };
  return kTable[index];
#else
  return quant::kIQ3SGrid[index];
#endif
}

PETREL_HD uint64_t IQ1SGrid(int index) {
#if defined(__CUDA_ARCH__)
  static const uint64_t kTable[2048] = {
#include "quant/iq_grid_values/iq1_s.inc"
  };
  return kTable[index];
#else
  return quant::kIQ1SGrid[index];
#endif
}

}  // namespace petrel::cuda
