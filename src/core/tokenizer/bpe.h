// The two merge engines: rank-ordered BPE over token ids (HF BPE, GGUF gpt2) and score-ordered
// SentencePiece merging over text (GGUF llama). Both are O(n log n) with a priority queue.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/tokenizer/vocab.h"

namespace petrel::tok {

class BpeMerges {
 public:
  // Registers "left right -> merged" with priority `rank` (lower merges first). The first
  // registration of a pair wins.
  void Add(int32_t left, int32_t right, int32_t rank, int32_t merged);
  size_t size() const { return map_.size(); }
  // Merges adjacent symbols of `ids` in place: always the lowest-ranked available pair, the
  // leftmost among equals. Negative ids never merge.
  void Apply(std::vector<int32_t>* ids) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  const Merge* Find(int32_t left, int32_t right) const;
  std::unordered_map<uint64_t, Merge> map_;
};

// The pairs of adjacent characters that occur inside some mergeable piece. A merge can only span
// a boundary between two characters that form such a pair, so a text splits at every other
// boundary into parts that merge independently, with the same result. For SentencePiece vocabs
// that is usually every word start (`x▁`), which keeps each priority queue small and in cache:
// one queue over a whole 1 MB text spends most of its time in cache misses.
class CharPairSet {
 public:
  void AddPiece(std::string_view piece);
  bool Contains(uint32_t left, uint32_t right) const {
    return pairs_.count((static_cast<uint64_t>(left) << 32) | right) != 0;
  }
  size_t size() const { return pairs_.size(); }

 private:
  std::unordered_set<uint64_t> pairs_;
};

// SentencePiece BPE on `text` (already escaped with U+2581): starts from single characters and
// repeatedly merges the adjacent pair whose concatenation is a mergeable vocab piece with the
// highest score (leftmost on ties). Pieces that are not tokens become byte tokens `<0xNN>` when
// the vocab has all of them, else `unk_id`; consecutive unknowns fuse into one `unk_id`.
// `joinable` must hold the character pairs of every piece `mergeable` allows (see CharPairSet).
void SpmTokenize(std::string_view text, const Vocab& vocab, const std::vector<bool>& mergeable,
                 const CharPairSet& joinable, int32_t unk_id, std::vector<int32_t>* out);

}  // namespace petrel::tok
