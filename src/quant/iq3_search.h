// Internal: the lookup tables of the IQ3 quantizers' grid search (ggml's `iq3xs_init_impl`),
// built once per codebook on first use, and the nearest-neighbour step that reads them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace petrel::quant {

// A point of the search space is four 3-bit levels l (element value 2l + 1 times the scale),
// packed as `code` = l0 | l1 << 3 | l2 << 6 | l3 << 9 (4096 codes). The codebook holds a
// subset of them; a code outside it is replaced by the nearest codebook points.
struct IQ3SearchTables {
  static constexpr int kCodes = 4096;
  // (grid_size, 4): the odd levels 2l + 1 of each codebook entry, in codebook order.
  std::vector<int8_t> grid;
  // (kCodes): the codebook index of each code, or -1 where the code is not in the codebook.
  std::vector<int16_t> index_of_code;
  // For a code outside the codebook, the candidates to try instead: the codebook indices at
  // the smallest few distinct squared distances from it, sorted by (distance, index).
  // neighbours[begin[code] .. begin[code + 1]) (empty for codes in the codebook).
  std::vector<uint32_t> neighbour_begin;  // (kCodes + 1)
  std::vector<uint16_t> neighbours;

  const int8_t* Levels(int grid_index) const { return grid.data() + 4 * grid_index; }
};

// The tables of IQ3_XXS (256 entries, neighbours at the 2 nearest distances) and IQ3_S (512
// entries, 3 distances). Built on the first call (a few milliseconds), thread-safe; the
// tables live until exit.
const IQ3SearchTables& IQ3XXSSearchTables();
const IQ3SearchTables& IQ3SSearchTables();

// ggml's `iq3_find_best_neighbour`: among the neighbours of `code`, the codebook entry whose
// values `scale` * (2l + 1) are nearest to `xval` (4 elements) in squared error weighted by
// `weight`; the first of equals wins. Writes its levels l to `levels` and returns its index.
int IQ3BestNeighbour(const IQ3SearchTables& tables, int code, const float* xval,
                     const float* weight, float scale, int8_t* levels);

// For what only a bug can break in the IQ3 tables and searches: prints `what` and aborts. (The
// quant layer sits below core/base and its PETREL_CHECK.)
inline void IQ3Check(bool ok, const char* what = "IQ3 search invariant") {
  if (!ok) {
    std::fprintf(stderr, "check failed: %s\n", what);
    std::abort();
  }
}

}  // namespace petrel::quant
