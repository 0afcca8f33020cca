// A character class of a grammar ([a-z], [^"\\], "x", `.`): sorted, merged code point ranges,
// possibly negated, with an ASCII bitmap for the common case.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace petrel {

class CharClass {
 public:
  // `ranges` are inclusive [first, last] pairs in any order; they are sorted and merged.
  CharClass(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated);

  bool Matches(uint32_t cpt) const {
    if (cpt < 128) return (ascii_[cpt >> 6] >> (cpt & 63)) & 1;
    return InRanges(cpt) != negated_;
  }
  // Whether some code point in [first, last] matches: a character whose first UTF-8 bytes are
  // known lies in such a range, and a token that ends inside it is allowed only if this holds.
  bool MatchesAnyIn(uint32_t first, uint32_t last) const;
  // The ranges as given (sorted, merged), before negation.
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }
  bool negated() const { return negated_; }
  bool operator==(const CharClass& other) const {
    return negated_ == other.negated_ && ranges_ == other.ranges_;
  }

 private:
  bool InRanges(uint32_t cpt) const;

  std::vector<std::pair<uint32_t, uint32_t>> ranges_;  // sorted, disjoint, not adjacent
  bool negated_;
  uint64_t ascii_[2] = {0, 0};  // Matches() for code points below 128
};

}  // namespace petrel
