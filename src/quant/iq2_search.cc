// The IQ2/IQ1 grid search tables, built from the codebooks of iq_grids.h on first use.
#include "quant/iq2_search.h"

#include <algorithm>
#include <cfloat>
#include <utility>

#include "quant/iq_grids.h"

namespace petrel::quant {
namespace {

// Every 16-bit key has an entry, so no key reads outside the map; the searches only make keys
// of levels 0..2 (up to 0xAAAA).
constexpr size_t kKeys = size_t{1} << 16;
// The largest squared distance between two patterns of odd values 1, 3, 5: 8 * 4^2.
constexpr int kMaxDistance = 8 * 16;

struct CodebookSpec {
  const uint64_t* grid;  // (size): one byte per element
  size_t size;
  int n_shells;        // distinct distances whose points are a key's neighbours
  bool signed_levels;  // IQ1: bytes are int8 -1, 0, 1; IQ2: bytes are 0x08, 0x19, 0x2b
};

CodebookSpec Spec(IQ2Codebook codebook) {
  switch (codebook) {
    case IQ2Codebook::kIQ2XXS:
      return {kIQ2XXSGrid, std::size(kIQ2XXSGrid), 2, false};
    case IQ2Codebook::kIQ2XS:
      return {kIQ2XSGrid, std::size(kIQ2XSGrid), 2, false};
    case IQ2Codebook::kIQ2S:
      return {kIQ2SGrid, std::size(kIQ2SGrid), 1, false};
    case IQ2Codebook::kIQ1S:
      return {kIQ1SGrid, std::size(kIQ1SGrid), 3, true};
  }
  return {kIQ2XXSGrid, std::size(kIQ2XXSGrid), 2, false};
}

// The level (0..2) a codebook byte stands for.
int LevelOfByte(uint8_t byte, bool signed_levels) {
  if (signed_levels) return int(int8_t(byte)) + 1;
  return byte == 0x08 ? 0 : byte == 0x19 ? 1 : 2;
}

}  // namespace

IQ2SearchTable::IQ2SearchTable(IQ2Codebook codebook) {
  const CodebookSpec spec = Spec(codebook);
  points_.resize(spec.size * 8);
  // Keys with a level 3 are never searched: they keep -1, the empty list at offset 0.
  map_.assign(kKeys, -1);
  neighbours_.push_back(0);
  for (size_t j = 0; j < spec.size; ++j) {
    IQ2Key key = 0;
    for (int i = 0; i < 8; ++i) {
      const int level = LevelOfByte(uint8_t(spec.grid[j] >> (8 * i)), spec.signed_levels);
      points_[8 * j + size_t(i)] = int8_t(2 * level + 1);
      key = IQ2Key(key | (level << (2 * i)));
    }
    map_[key] = int32_t(j);
  }

  // Each off-grid pattern of levels 0..2 (3^8 of them, less the grid) gets the grid points at
  // its `n_shells` nearest distinct distances, in (distance, index) order.
  std::vector<int> distance(spec.size);
  std::vector<std::pair<int, uint16_t>> candidates;
  for (int pattern = 0; pattern < 6561; ++pattern) {
    int8_t pos[8];
    IQ2Key key = 0;
    for (int i = 0, rest = pattern; i < 8; ++i, rest /= 3) {
      pos[i] = int8_t(2 * (rest % 3) + 1);
      key = IQ2Key(key | ((rest % 3) << (2 * i)));
    }
    if (map_[key] >= 0) continue;
    bool present[kMaxDistance + 1] = {};
    for (size_t j = 0; j < spec.size; ++j) {
      const int8_t* point = points_.data() + 8 * j;
      int d2 = 0;
      for (int i = 0; i < 8; ++i) d2 += (point[i] - pos[i]) * (point[i] - pos[i]);
      distance[j] = d2;
      present[d2] = true;
    }
    int limit = 0;
    for (int d2 = 0, shells = 0; d2 <= kMaxDistance && shells < spec.n_shells; ++d2) {
      if (present[d2]) {
        limit = d2;
        ++shells;
      }
    }
    candidates.clear();
    for (size_t j = 0; j < spec.size; ++j) {
      if (distance[j] <= limit) candidates.emplace_back(distance[j], uint16_t(j));
    }
    std::sort(candidates.begin(), candidates.end());
    map_[key] = -int32_t(neighbours_.size()) - 1;
    neighbours_.push_back(uint16_t(candidates.size()));
    for (const auto& candidate : candidates) neighbours_.push_back(candidate.second);
  }
}

const IQ2SearchTable& IQ2SearchTable::For(IQ2Codebook codebook) {
  switch (codebook) {
    case IQ2Codebook::kIQ2XXS: {
      static const IQ2SearchTable table(IQ2Codebook::kIQ2XXS);
      return table;
    }
    case IQ2Codebook::kIQ2XS: {
      static const IQ2SearchTable table(IQ2Codebook::kIQ2XS);
      return table;
    }
    case IQ2Codebook::kIQ2S: {
      static const IQ2SearchTable table(IQ2Codebook::kIQ2S);
      return table;
    }
    case IQ2Codebook::kIQ1S: {
      static const IQ2SearchTable table(IQ2Codebook::kIQ1S);
      return table;
    }
  }
  static const IQ2SearchTable fallback(IQ2Codebook::kIQ2XXS);
  return fallback;
}

std::span<const uint16_t> IQ2SearchTable::Neighbours(IQ2Key key) const {
  const int32_t entry = map_[key];
  if (entry >= 0) return {};
  const size_t offset = size_t(-(entry + 1));
  return {neighbours_.data() + offset + 1, neighbours_[offset]};
}

namespace {

void LevelsOf(const IQ2SearchTable& table, int index, int8_t* levels) {
  const int8_t* point = table.Point(index);
  for (int i = 0; i < 8; ++i) levels[i] = int8_t((point[i] - 1) / 2);
}

// Element i's term of the weighted squared distance at each level l:
// weight[i] * (scale * values[l] - xval[i])^2, rounded as ggml computes it ((w * diff) * diff),
// so that adding a point's terms in element order gives ggml's distance bit for bit, and each
// of the many candidate points costs 8 additions.
struct LevelTerms {
  float term[8][3];
  LevelTerms(const float* xval, const float* weight, float scale, const float* values) {
    for (int i = 0; i < 8; ++i) {
      for (int l = 0; l < 3; ++l) {
        const float diff = scale * values[l] - xval[i];
        term[i][l] = weight[i] * diff * diff;
      }
    }
  }
  float Distance(const int8_t* point) const {
    float d2 = 0;
    for (int i = 0; i < 8; ++i) d2 += term[i][point[i] >> 1];
    return d2;
  }
};

// The candidate of least distance (the first on ties), or -1 where none is below FLT_MAX.
int Nearest(const IQ2SearchTable& table, std::span<const uint16_t> candidates,
            const LevelTerms& terms) {
  float best_d2 = FLT_MAX;
  int best = -1;
  for (const uint16_t index : candidates) {
    const float d2 = terms.Distance(table.Point(index));
    if (d2 < best_d2) {
      best_d2 = d2;
      best = index;
    }
  }
  return best;
}

}  // namespace

int IQ2BestNeighbour(const IQ2SearchTable& table, IQ2Key key, const float* xval,
                     const float* weight, float scale, int8_t* levels) {
  static constexpr float kValues[3] = {1, 3, 5};
  const std::span<const uint16_t> neighbours = table.Neighbours(key);
  int best = Nearest(table, neighbours, LevelTerms(xval, weight, scale, kValues));
  // Only non-finite inputs leave every distance unbeaten: take the nearest point.
  if (best < 0) best = neighbours.empty() ? 0 : neighbours[0];
  LevelsOf(table, best, levels);
  return best;
}

int IQ1BestNeighbour(const IQ2SearchTable& table, IQ2Key key, const float* xval,
                     const float* weight, float scale, const float* level_values, int8_t* levels) {
  const LevelTerms terms(xval, weight, scale, level_values);
  const std::span<const uint16_t> neighbours = table.Neighbours(key);
  int best = Nearest(table, neighbours, terms);
  // As ggml does, a whole-grid scan where no neighbour scored (non-finite inputs only).
  if (best < 0) {
    float best_d2 = FLT_MAX;
    for (int index = 0; index < int(table.size()); ++index) {
      const float d2 = terms.Distance(table.Point(index));
      if (d2 < best_d2) {
        best_d2 = d2;
        best = index;
      }
    }
  }
  if (best < 0) best = neighbours.empty() ? 0 : neighbours[0];
  LevelsOf(table, best, levels);
  return best;
}

}  // namespace petrel::quant
