// Importance matrices (`petrel imatrix`, `petrel quantize --imatrix`): for each weight matrix, the
// sum over the calibration tokens of each input column's squared activation, and the token count.
// Read and written in llama.cpp's two layouts, so files go both ways between the tools:
//
// GGUF (llama-imatrix's default): metadata `general.type` = "imatrix", `imatrix.datasets`
// (array of strings), `imatrix.chunk_count` and `imatrix.chunk_size` (u32); per weight `<name>`
// two F32 tensors, `<name>.in_sum2` of shape [n_in, n_mat] (Σ x_j², per matrix of a stacked
// 3-D weight; n_mat = 1 for a plain matrix) and `<name>.counts` of shape [1, n_mat] (tokens),
// names sorted. `<name>.in_sum` (Σ x_j) may be present and is ignored.
//
// Legacy .dat (little-endian): int32 n_entries, then per entry int32 name length, the name's
// bytes, int32 ncall, int32 nval, float32 values[nval] where values = mean(x_j²) × ncall (ncall:
// the chunks seen); then int32 chunk count, int32 length and the bytes of the dataset's name.
// Only the mean survives in this layout; it reads back as sum2 = values, counts = ncall.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace petrel {

struct ImatrixEntry {
  int64_t n_in = 0;           // input columns of the weight
  std::vector<float> sum2;    // (n_mat × n_in): Σ over tokens of x_j²
  std::vector<float> counts;  // (n_mat): tokens summed

  size_t n_mat() const { return counts.size(); }
  // The importance of each column of matrix `mat`: its mean squared activation.
  std::vector<float> Importance(size_t mat = 0) const;
};

struct Imatrix {
  std::map<std::string, ImatrixEntry> entries;  // by weight name (GGUF naming)
  std::vector<std::string> datasets;            // the calibration texts
  uint32_t chunk_count = 0;                     // chunks evaluated
  uint32_t chunk_size = 0;                      // tokens per chunk
};

enum class ImatrixFormat : uint8_t { kGguf, kDat };

// Written atomically (AtomicFile): on error the destination is left as it was.
Status WriteImatrix(const Imatrix& imatrix, const std::string& path, ImatrixFormat format);

// Reads either layout (GGUF by its magic). Every size, count and value is checked: a truncated
// or damaged file, a count of zero or a negative or non-finite sum is a one-line error naming
// the file and the entry.
Result<Imatrix> ReadImatrix(const std::string& path);

}  // namespace petrel
