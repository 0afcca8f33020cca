// The run-time state of a grammar over generated text: the set of parse stacks (each the
// positions still to match, innermost rule on top), plus the bytes of a character that a token
// left unfinished. Per step it computes which tokens may come next by walking the vocabulary
// trie against the stacks, and advances with the chosen token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/base/status.h"
#include "core/grammar/grammar.h"
#include "core/grammar/vocab_trie.h"

namespace petrel {

class GrammarMatcher {
 public:
  // `vocab` may be null for a matcher that only takes text (AcceptBytes).
  static Result<std::unique_ptr<GrammarMatcher>> Create(std::shared_ptr<const Grammar> grammar,
                                                        std::shared_ptr<const VocabTrie> vocab);

  // Sets allowed[id] (n_vocab) to 1 for each token that may come next, 0 otherwise. End tokens
  // are allowed only where the text so far is a complete match. Fails when matching would need
  // more parse stacks than the grammar's limit.
  Status ComputeMask(std::vector<uint8_t>* allowed);
  // Advances over `token`'s bytes; fails (changing nothing) if the grammar does not allow it.
  Status AcceptToken(int32_t token);
  Status AcceptBytes(std::string_view bytes);

  // The text so far is a complete match (an end token may come).
  bool CanEnd() const;
  // Some stack still wants characters.
  bool CanContinue() const;
  // An end token was accepted.
  bool ended() const { return ended_; }
  // The first failure of ComputeMask or AcceptToken, kept: a sequence that samples through the
  // mask stage checks it after each step. ComputeMask also fails when no token at all may
  // come next (the grammar needs a character the vocabulary cannot spell).
  const Status& error() const { return error_; }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;  // the empty stack: the grammar is complete
  struct Frame {
    uint32_t pos;     // element to match next
    uint32_t parent;  // the frame below, or kEmpty
    uint64_t hash;    // of the whole stack's content, for deduplication
  };
  struct SetSpan {  // a set of stacks in set_pool_, sorted by hash
    uint32_t offset;
    uint32_t size;
    uint64_t signature;
  };
  struct Utf8State {
    uint32_t value = 0;      // bits of the character so far
    uint32_t remaining = 0;  // continuation bytes still expected
    uint32_t min = 0;        // smallest code point of its length (no overlong forms)
  };
  struct MemoEntry {
    SetSpan in;
    uint32_t cpt;
    SetSpan out;
  };

  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabTrie> vocab);
  Status AcceptTokenBytes(int32_t token);
  uint64_t StackHash(uint32_t stack) const;
  uint32_t Push(uint32_t parent, uint32_t pos);
  bool SameStack(uint32_t a, uint32_t b) const;
  bool SameSet(const SetSpan& a, const SetSpan& b) const;
  // Adds every stack that `stack` expands to (tops that are characters, or kEmpty) to scratch_.
  void Expand(uint32_t stack);
  void AddToScratch(uint32_t stack);
  // The stacks after character `cpt` (a new span of set_pool_; size 0 when none match).
  SetSpan Advance(const SetSpan& set, uint32_t cpt);
  SetSpan AdvanceMemo(const SetSpan& set, uint32_t cpt);
  SetSpan FinishScratch();
  // Feeds one byte: false when it cannot be part of the text.
  bool StepByte(const SetSpan& set, Utf8State* utf8, uint8_t byte, SetSpan* next);
  bool PartialPossible(const SetSpan& set, const Utf8State& utf8) const;
  // Moves the committed stacks to the front of a fresh frame arena.
  void Compact(const SetSpan& set);
  Status Overflowed() const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const VocabTrie> vocab_;
  std::vector<Frame> frames_;
  std::vector<uint32_t> set_pool_;
  SetSpan committed_{0, 0, 0};
  Utf8State committed_utf8_;
  bool ended_ = false;
  Status error_;
  bool overflow_ = false;
  // Scratch of Advance/Expand.
  std::vector<uint32_t> scratch_;
  std::vector<uint32_t> work_;
  std::unordered_map<uint64_t, uint32_t> scratch_index_;  // hash -> a stack in scratch_
  std::vector<uint32_t> expanded_;                        // stacks already expanded this step
  std::unordered_map<uint64_t, uint32_t> expanded_index_;
  size_t expand_steps_ = 0;
  std::unordered_multimap<uint64_t, uint32_t> memo_;  // (set signature, cpt) -> memo_entries_
  std::vector<MemoEntry> memo_entries_;
  // The last few masks by state: inside a string or a repeated class the state after a token
  // is often the state before it, and its mask is then a copy.
  struct CachedMask {
    std::vector<uint32_t> state;  // StateKey()
    std::vector<uint8_t> mask;    // (n_vocab)
  };
  static constexpr size_t kCachedMasks = 4;
  std::vector<CachedMask> mask_cache_;
  size_t mask_cache_next_ = 0;
  // The committed state as plain data: the partial character, then each stack's positions.
  std::vector<uint32_t> StateKey() const;
};

}  // namespace petrel
