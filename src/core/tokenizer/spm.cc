// SentencePiece-style BPE: merge by piece score, as llama.cpp's llm_tokenizer_spm does.
#include <queue>
#include <string>

#include "core/tokenizer/bpe.h"
#include "core/tokenizer/unicode.h"

namespace petrel::tok {
namespace {

struct Symbol {
  int32_t prev;
  int32_t next;
  size_t offset;  // into the text
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

}  // namespace

void SpmTokenize(std::string_view text, const Vocab& vocab, const std::vector<bool>& mergeable,
                 int32_t unk_id, std::vector<int32_t>* out) {
  std::vector<Symbol> symbols;
  for (size_t offset = 0; offset < text.size();) {
    const size_t length = Utf8CharLen(text, offset);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({index - 1, offset + length < text.size() ? index + 1 : -1, offset, length});
    offset += length;
  }
  std::priority_queue<Bigram> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const std::string_view merged =
        text.substr(symbols[left].offset, symbols[left].length + symbols[right].length);
    const int32_t id = vocab.Find(merged);
    if (id < 0 || !mergeable[id]) return;
    queue.push({vocab.scores[id], left, merged.size()});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
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
  bool last_was_unknown = false;
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].offset, symbols[i].length);
    const int32_t id = vocab.Find(piece);
    if (id >= 0) {
      out->push_back(id);
      last_was_unknown = false;
    } else if (HasByteTokens(vocab, piece)) {
      for (const char c : piece) out->push_back(vocab.byte_ids[static_cast<uint8_t>(c)]);
      last_was_unknown = false;
    } else if (!last_was_unknown && unk_id >= 0) {
      out->push_back(unk_id);
      last_was_unknown = true;
    }
  }
}

}  // namespace petrel::tok
