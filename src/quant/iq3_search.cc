// The IQ3 quantizers' search tables, derived from the codebooks of iq_grids.cc.
#include "quant/iq3_search.h"

#include <algorithm>
#include <cfloat>
#include <utility>

#include "quant/iq_grids.h"

namespace petrel::quant {
namespace {

// The byte a codebook entry stores for level l = 0..7 of each format (its decoder's
// magnitudes): IQ3_S stores 2l + 1 itself, IQ3_XXS a scaled copy.
constexpr uint8_t kIQ3XXSLevelBytes[8] = {4, 12, 20, 28, 36, 44, 52, 62};
constexpr uint8_t kIQ3SLevelBytes[8] = {1, 3, 5, 7, 9, 11, 13, 15};

// The codebook as levels, the code → index map, and for every code outside the codebook the
// entries at its `n_distances` smallest distinct squared distances.
IQ3SearchTables BuildTables(const uint32_t* codebook, int grid_size,
                            const uint8_t (&level_bytes)[8], int n_distances) {
  IQ3SearchTables tables;
  tables.grid.resize(size_t(4 * grid_size));
  tables.index_of_code.assign(IQ3SearchTables::kCodes, -1);
  for (int entry = 0; entry < grid_size; ++entry) {
    int code = 0;
    for (int i = 0; i < 4; ++i) {
      const uint8_t byte = uint8_t(codebook[entry] >> (8 * i));
      const uint8_t* found = std::find(level_bytes, level_bytes + 8, byte);
      IQ3Check(found != level_bytes + 8, "IQ3 codebook byte that is no level");
      const int level = int(found - level_bytes);
      tables.grid[size_t(4 * entry + i)] = int8_t(2 * level + 1);
      code |= level << (3 * i);
    }
    IQ3Check(tables.index_of_code[size_t(code)] < 0, "IQ3 codebook entry twice");
    tables.index_of_code[size_t(code)] = int16_t(entry);
  }
  tables.neighbour_begin.assign(IQ3SearchTables::kCodes + 1, 0);
  std::vector<std::pair<int, int>> by_distance(static_cast<size_t>(grid_size));  // (d2, entry)
  for (int code = 0; code < IQ3SearchTables::kCodes; ++code) {
    tables.neighbour_begin[size_t(code)] = uint32_t(tables.neighbours.size());
    if (tables.index_of_code[size_t(code)] >= 0) continue;
    int8_t point[4];
    for (int i = 0; i < 4; ++i) point[i] = int8_t(2 * ((code >> (3 * i)) & 7) + 1);
    for (int entry = 0; entry < grid_size; ++entry) {
      const int8_t* levels = tables.Levels(entry);
      int d2 = 0;
      for (int i = 0; i < 4; ++i) d2 += (levels[i] - point[i]) * (levels[i] - point[i]);
      by_distance[size_t(entry)] = {d2, entry};
    }
    std::sort(by_distance.begin(), by_distance.end());
    int distance = by_distance[0].first, n_seen = 1;
    for (const auto& [d2, entry] : by_distance) {
      if (d2 > distance) {
        if (n_seen == n_distances) break;
        distance = d2;
        ++n_seen;
      }
      tables.neighbours.push_back(uint16_t(entry));
    }
  }
  tables.neighbour_begin[IQ3SearchTables::kCodes] = uint32_t(tables.neighbours.size());
  return tables;
}

}  // namespace

const IQ3SearchTables& IQ3XXSSearchTables() {
  // A function-local static: built once, on first use, with concurrent callers waiting.
  static const IQ3SearchTables tables = BuildTables(kIQ3XXSGrid, 256, kIQ3XXSLevelBytes, 2);
  return tables;
}

const IQ3SearchTables& IQ3SSearchTables() {
  static const IQ3SearchTables tables = BuildTables(kIQ3SGrid, 512, kIQ3SLevelBytes, 3);
  return tables;
}

int IQ3BestNeighbour(const IQ3SearchTables& tables, int code, const float* xval,
                     const float* weight, float scale, int8_t* levels) {
  const uint32_t begin = tables.neighbour_begin[size_t(code)];
  const uint32_t end = tables.neighbour_begin[size_t(code) + 1];
  IQ3Check(begin < end, "IQ3 code without neighbours");
  float best_d2 = FLT_MAX;
  int best = -1;
  for (uint32_t n = begin; n < end; ++n) {
    const int8_t* candidate = tables.Levels(tables.neighbours[n]);
    float d2 = 0;
    for (int i = 0; i < 4; ++i) {
      const float diff = scale * float(candidate[i]) - xval[i];
      d2 += weight[i] * diff * diff;
    }
    if (d2 < best_d2) {
      best_d2 = d2;
      best = tables.neighbours[n];
    }
  }
  IQ3Check(best >= 0, "IQ3 neighbour search found none");
  const int8_t* chosen = tables.Levels(best);
  for (int i = 0; i < 4; ++i) levels[i] = int8_t((chosen[i] - 1) / 2);
  return best;
}

}  // namespace petrel::quant
