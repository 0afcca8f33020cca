// Internal: the grid searches shared by the IQ2 and IQ1 quantizers (iq2_weighted.cc,
// iq1_weighted.cc). A group of 8 elements takes one point of a codebook (iq_grids.h); the search
// rounds each element to a level l in 0..2, and where that pattern of levels is not a grid point,
// picks the best among its nearest grid points. The tables are ggml's `iq2xs_init_impl` ones
// (grid, map, neighbours), built from the codebooks on first use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace petrel::quant {

// The codebooks searched; IQ1_S and IQ1_M share one.
enum class IQ2Codebook : uint8_t { kIQ2XXS, kIQ2XS, kIQ2S, kIQ1S };

// A pattern of 8 levels, element i's level l (0..2) at bits 2i..2i+1: the key of the map.
using IQ2Key = uint16_t;

class IQ2SearchTable {
 public:
  // The table of `codebook`, built on the first call (thread-safe, a function-local static) and
  // kept for the process: 15-60 ms of CPU and 0.5-1 MB each.
  static const IQ2SearchTable& For(IQ2Codebook codebook);

  size_t size() const { return points_.size() / 8; }
  // Grid point `index`'s 8 elements, each as the odd value 2l + 1 of its level l (1, 3 or 5).
  const int8_t* Point(int index) const { return points_.data() + 8 * size_t(index); }
  // The grid index of the pattern `key`, or -1 where it is not a grid point.
  int IndexOf(IQ2Key key) const {
    const int32_t entry = map_[key];
    return entry >= 0 ? entry : -1;
  }
  // For a `key` off the grid: the grid points at its nearest distinct squared distances (as
  // many distances as the format's search wants: 2 for IQ2_XXS/IQ2_XS, 1 for IQ2_S, 3 for the
  // IQ1 grid), ordered by distance, then index. Empty for a key on the grid.
  std::span<const uint16_t> Neighbours(IQ2Key key) const;

  IQ2SearchTable(const IQ2SearchTable&) = delete;
  IQ2SearchTable& operator=(const IQ2SearchTable&) = delete;

 private:
  explicit IQ2SearchTable(IQ2Codebook codebook);

  std::vector<int8_t> points_;  // (size, 8): odd values 2l + 1
  // (65536): grid index >= 0; for an off-grid key -(offset + 1) of its list in neighbours_,
  // which holds the list's length, then the list.
  std::vector<int32_t> map_;
  std::vector<uint16_t> neighbours_;
};

// ggml's `iq2_find_best_neighbour`: among the neighbours of off-grid `key`, the grid point that
// minimises sum(weight * (scale * q - xval)^2) over the 8 elements (first one on ties). Writes its
// levels to `levels` (8) and returns its index.
int IQ2BestNeighbour(const IQ2SearchTable& table, IQ2Key key, const float* xval,
                     const float* weight, float scale, int8_t* levels);

// ggml's `iq1_find_best_neighbour2`: the same, with each level l standing for `level_values[l]`
// (the IQ1 levels -1, 0, 1 shifted by the group's delta).
int IQ1BestNeighbour(const IQ2SearchTable& table, IQ2Key key, const float* xval,
                     const float* weight, float scale, const float* level_values, int8_t* levels);

}  // namespace petrel::quant
