// The vocabulary as a byte trie over each token's bytes, built once per tokenizer: the token
// mask walks it against the grammar's parse stacks, so a prefix the grammar rejects prunes
// every token that starts with it at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace petrel {

class VocabTrie {
 public:
  struct Node {
    uint32_t first_child;  // children are nodes [first_child, first_child + n_children)
    uint32_t n_children;
    uint32_t first_token;  // tokens ending here are token_ids()[first_token, + n_tokens)
    uint32_t n_tokens;
    uint8_t byte;  // the edge from the parent
  };

  // `token_bytes` (n_vocab): each token's bytes (Tokenizer::TokenBytes); tokens with none
  // (special tokens) are left out. `end_tokens`: the end-of-generation ids, which the mask
  // allows only where the grammar can end.
  VocabTrie(const std::vector<std::string>& token_bytes, std::vector<int32_t> end_tokens);

  const std::vector<Node>& nodes() const { return nodes_; }  // nodes()[0] is the root
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  const std::vector<int32_t>& end_tokens() const { return end_tokens_; }
  size_t n_vocab() const { return n_vocab_; }
  const std::string& bytes(int32_t token) const { return token_bytes_[size_t(token)]; }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> token_ids_;
  std::vector<int32_t> end_tokens_;
  std::vector<std::string> token_bytes_;
  size_t n_vocab_ = 0;
};

}  // namespace petrel
