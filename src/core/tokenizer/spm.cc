// SentencePiece-style BPE: merge by piece score, as llama.cpp's llm_tokenizer_spm does, one
// independent part of the text at a time (see CharPairSet).
#include <algorithm>
#include <string>

#include "core/tokenizer/bpe.h"
#include "core/tokenizer/unicode.h"

namespace petrel::tok {
namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  size_t offset;  // into the part
  size_t length;  // bytes; 0 once merged into the left neighbour
};

struct Bigram {
  float score;
  int32_t left;
  size_t length;                               // of the merged text, to detect stale entries
  bool operator<(const Bigram& other) const {  // pops the highest score, then the leftmost
    if (score != other.score) return score < other.score;
    return left > other.left;
  }
};

bool HasByteTokens(const Vocab& vocab, std::string_view piece) {
  for (const char c : piece) {
    if (vocab.byte_ids[static_cast<uint8_t>(c)] < 0) return false;
  }
  return true;
}

// Buffers reused across the parts of one text, and the unknown-fusing state that spans them.
struct SpmState {
  std::vector<Symbol> symbols;
  std::vector<Bigram> queue;  // a max-heap (std::push_heap / std::pop_heap)
  bool last_was_unknown = false;
};

void MergePart(std::string_view text, const Vocab& vocab, const std::vector<bool>& mergeable,
               int32_t unk_id, SpmState* state, std::vector<int32_t>* out) {
  std::vector<Symbol>& symbols = state->symbols;
  std::vector<Bigram>& queue = state->queue;
  symbols.clear();
  queue.clear();
  for (size_t offset = 0; offset < text.size();) {
    const size_t length = Utf8CharLen(text, offset);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({index - 1, offset + length < text.size() ? index + 1 : -1, offset, length});
    offset += length;
  }
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const std::string_view merged =
        text.substr(symbols[left].offset, symbols[left].length + symbols[right].length);
    const int32_t id = vocab.Find(merged);
    if (id < 0 || !mergeable[id]) return;
    queue.push_back({vocab.scores[id], left, merged.size()});
    std::push_heap(queue.begin(), queue.end());
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end());
    const Bigram top = queue.back();
    queue.pop_back();
    Symbol& left = symbols[top.left];
    if (left.length == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.length == 0 || left.length + right.length != top.length) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    try_add(left.prev, top.left);
    try_add(top.left, left.next);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].offset, symbols[i].length);
    const int32_t id = vocab.Find(piece);
    if (id >= 0) {
      out->push_back(id);
      state->last_was_unknown = false;
    } else if (HasByteTokens(vocab, piece)) {
      for (const char c : piece) out->push_back(vocab.byte_ids[static_cast<uint8_t>(c)]);
      state->last_was_unknown = false;
    } else if (!state->last_was_unknown && unk_id >= 0) {
      out->push_back(unk_id);
      state->last_was_unknown = true;
    }
  }
}

}  // namespace

void CharPairSet::AddPiece(std::string_view piece) {
  size_t pos = 0;
  uint32_t previous = 0;
  for (bool first = true; pos < piece.size(); first = false) {
    const uint32_t cpt = DecodeUtf8(piece, &pos);
    if (!first) pairs_.insert((static_cast<uint64_t>(previous) << 32) | cpt);
    previous = cpt;
  }
}

void SpmTokenize(std::string_view text, const Vocab& vocab, const std::vector<bool>& mergeable,
                 const CharPairSet& joinable, int32_t unk_id, std::vector<int32_t>* out) {
  SpmState state;
  size_t part_start = 0;
  uint32_t previous = 0;
  bool previous_valid = false;
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const uint32_t cpt = DecodeUtf8(text, &pos);
    // An invalid byte decodes as U+FFFD but is not that character: never split next to it.
    const bool valid = !(cpt == kReplacementChar && pos - start == 1);
    if (start > part_start && valid && previous_valid && !joinable.Contains(previous, cpt)) {
      MergePart(text.substr(part_start, start - part_start), vocab, mergeable, unk_id, &state, out);
      part_start = start;
    }
    previous = cpt;
    previous_valid = valid;
  }
  MergePart(text.substr(part_start), vocab, mergeable, unk_id, &state, out);
}

}  // namespace petrel::tok
