// A batch's host arrays (BatchContext) packed into one int32 array, so BeginBatch uploads them
// with one copy. Each array starts at a multiple of 64 elements (256 bytes), the alignment the
// kernels' loads expect of every device pointer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/runtime/backend.h"

namespace petrel::cuda {

// Element offsets of each array in the packed batch.
struct BatchLayout {
  size_t tokens = 0, positions = 0, token_seq = 0, block_tables = 0, block_table_begin = 0,
         n_ctx = 0, kv_slot = 0, selected_rows = 0;
  size_t total = 0;  // elements
};

// Packs `batch` into `out` (resized; padding is zero) and returns where each array is.
BatchLayout PackBatch(const BatchContext& batch, std::vector<int32_t>* out);

// The device copies of the arrays, each a pointer into the one uploaded buffer.
struct DeviceBatch {
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* token_seq = nullptr;
  const int32_t* block_tables = nullptr;
  const int32_t* block_table_begin = nullptr;
  const int32_t* n_ctx = nullptr;
  const int32_t* kv_slot = nullptr;
  const int32_t* selected_rows = nullptr;
};
DeviceBatch PointersInto(const int32_t* device_base, const BatchLayout& layout);

}  // namespace petrel::cuda
