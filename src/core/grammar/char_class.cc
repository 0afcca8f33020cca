// CharClass: merging ranges and the range queries the token mask needs.
#include "core/grammar/char_class.h"

#include <algorithm>

namespace petrel {

CharClass::CharClass(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated)
    : negated_(negated) {
  for (auto& range : ranges) {
    if (range.first > range.second) std::swap(range.first, range.second);
  }
  std::sort(ranges.begin(), ranges.end());
  for (const auto& range : ranges) {
    if (!ranges_.empty() && uint64_t(range.first) <= uint64_t(ranges_.back().second) + 1) {
      ranges_.back().second = std::max(ranges_.back().second, range.second);
    } else {
      ranges_.push_back(range);
    }
  }
  for (uint32_t cpt = 0; cpt < 128; ++cpt) {
    if (InRanges(cpt) != negated_) ascii_[cpt >> 6] |= uint64_t(1) << (cpt & 63);
  }
}

bool CharClass::InRanges(uint32_t cpt) const {
  // The first range whose end is >= cpt.
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), cpt,
                             [](const std::pair<uint32_t, uint32_t>& range, uint32_t value) {
                               return range.second < value;
                             });
  return it != ranges_.end() && it->first <= cpt;
}

bool CharClass::MatchesAnyIn(uint32_t first, uint32_t last) const {
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), first,
                             [](const std::pair<uint32_t, uint32_t>& range, uint32_t value) {
                               return range.second < value;
                             });
  if (!negated_) return it != ranges_.end() && it->first <= last;
  // Negated: some code point of [first, last] lies outside every range. Ranges are merged, so
  // [first, last] is covered only if one range covers all of it.
  return !(it != ranges_.end() && it->first <= first && it->second >= last);
}

}  // namespace petrel
