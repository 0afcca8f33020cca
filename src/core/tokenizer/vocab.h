// The vocabulary every tokenizer model shares: pieces, kinds, scores, the text -> id map, and a
// byte trie for matching added/special tokens in text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace petrel::tok {

// Token kinds, numbered as GGUF's `tokenizer.ggml.token_type` (llama.cpp's LLAMA_TOKEN_TYPE_*).
enum class TokenKind : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

struct Vocab {
  std::vector<std::string> pieces;  // (n_vocab) raw token text; "" for holes
  std::vector<TokenKind> kinds;     // (n_vocab)
  std::vector<float> scores;        // (n_vocab) SPM scores; 0 when absent
  StringMap<int32_t> ids;           // text -> lowest id with that text
  int32_t byte_ids[256];            // id of "<0xNN>" or -1

  Vocab();
  size_t size() const { return pieces.size(); }
  // Sets token `id` (growing the vocabulary as needed).
  void Set(int32_t id, std::string piece, TokenKind kind, float score = 0.0f);
  int32_t Find(std::string_view text) const;  // -1 if absent
  bool Valid(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < pieces.size(); }
};

// Byte trie over token texts: the longest pattern starting at a position.
class TokenTrie {
 public:
  void Add(std::string_view text, int32_t value);
  bool empty() const { return n_patterns_ == 0; }
  // Returns the value of the longest pattern that starts at `text[pos]` (its length in *length),
  // or -1.
  int32_t LongestAt(std::string_view text, size_t pos, size_t* length) const;
  // Calls `fn(value)` for every pattern that starts at `text[pos]`, shortest first.
  template <typename Fn>
  void ForEachAt(std::string_view text, size_t pos, Fn&& fn) const {
    if (pos >= text.size() || !first_bytes_[static_cast<uint8_t>(text[pos])]) return;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[i]);
      const auto it = edges_.find(key);
      if (it == edges_.end()) return;
      node = it->second;
      if (nodes_[node].value >= 0) fn(nodes_[node].value);
    }
  }

 private:
  struct Node {
    int32_t value = -1;
  };
  std::vector<Node> nodes_{Node{}};
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  bool first_bytes_[256] = {};                   // some pattern starts with this byte
  size_t n_patterns_ = 0;
};

}  // namespace petrel::tok
