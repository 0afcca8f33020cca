// Vocab bookkeeping and the token trie.
#include "core/tokenizer/vocab.h"

#include <cstdio>

namespace petrel::tok {

Vocab::Vocab() {
  for (int32_t& id : byte_ids) id = -1;
}

void Vocab::Set(int32_t id, std::string piece, TokenKind kind, float score) {
  const auto index = static_cast<size_t>(id);
  if (index >= pieces.size()) {
    pieces.resize(index + 1);
    kinds.resize(index + 1, TokenKind::kUndefined);
    scores.resize(index + 1, 0.0f);
  }
  // "<0xNN>" pieces are the byte-fallback tokens, whatever their declared kind.
  if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>') {
    unsigned value = 0;
    if (std::sscanf(piece.c_str() + 3, "%2X", &value) == 1 && byte_ids[value] < 0) {
      byte_ids[value] = id;
    }
  }
  const auto [it, inserted] = ids.emplace(piece, id);
  if (!inserted && it->second > id) it->second = id;
  pieces[index] = std::move(piece);
  kinds[index] = kind;
  scores[index] = score;
}

int32_t Vocab::Find(std::string_view text) const {
  const auto it = ids.find(text);
  return it == ids.end() ? -1 : it->second;
}

void TokenTrie::Add(std::string_view text, int32_t value) {
  if (text.empty()) return;
  first_bytes_[static_cast<uint8_t>(text[0])] = true;
  int32_t node = 0;
  for (const char c : text) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(c);
    const auto it = edges_.find(key);
    if (it != edges_.end()) {
      node = it->second;
    } else {
      nodes_.push_back(Node{});
      const auto child = static_cast<int32_t>(nodes_.size() - 1);
      edges_.emplace(key, child);
      node = child;
    }
  }
  if (nodes_[node].value < 0) ++n_patterns_;
  nodes_[node].value = value;
}

int32_t TokenTrie::LongestAt(std::string_view text, size_t pos, size_t* length) const {
  int32_t node = 0;
  int32_t best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[i]);
    const auto it = edges_.find(key);
    if (it == edges_.end()) break;
    node = it->second;
    if (nodes_[node].value >= 0) {
      best = nodes_[node].value;
      *length = i + 1 - pos;
    }
  }
  return best;
}

}  // namespace petrel::tok
