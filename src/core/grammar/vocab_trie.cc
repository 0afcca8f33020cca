// VocabTrie: built breadth-first from the tokens sorted by bytes, so that each node's children
// are contiguous and a walk touches memory in order.
#include "core/grammar/vocab_trie.h"

#include <algorithm>
#include <numeric>

namespace petrel {

VocabTrie::VocabTrie(const std::vector<std::string>& token_bytes, std::vector<int32_t> end_tokens)
    : end_tokens_(std::move(end_tokens)), token_bytes_(token_bytes), n_vocab_(token_bytes.size()) {
  std::vector<int32_t> sorted;
  sorted.reserve(token_bytes.size());
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (!token_bytes[id].empty()) sorted.push_back(int32_t(id));
  }
  std::sort(sorted.begin(), sorted.end(), [&](int32_t a, int32_t b) {
    return token_bytes[size_t(a)] < token_bytes[size_t(b)] ||
           (token_bytes[size_t(a)] == token_bytes[size_t(b)] && a < b);
  });
  token_ids_ = sorted;  // a node's tokens are a run of this order
  // Each node covers the run [begin, end) of sorted tokens that share its prefix of `depth`
  // bytes; the ones exactly `depth` long end at it and come first.
  struct Pending {
    uint32_t begin, end, depth;
  };
  std::vector<Pending> pending = {{0, uint32_t(sorted.size()), 0}};
  nodes_.push_back(Node{0, 0, 0, 0, 0});
  for (size_t index = 0; index < pending.size(); ++index) {
    const Pending run = pending[index];
    uint32_t pos = run.begin;
    while (pos < run.end && token_bytes[size_t(sorted[pos])].size() == run.depth) ++pos;
    nodes_[index].first_token = run.begin;
    nodes_[index].n_tokens = pos - run.begin;
    nodes_[index].first_child = uint32_t(nodes_.size());
    while (pos < run.end) {
      const uint8_t byte = uint8_t(token_bytes[size_t(sorted[pos])][run.depth]);
      uint32_t next = pos;
      while (next < run.end && uint8_t(token_bytes[size_t(sorted[next])][run.depth]) == byte) {
        ++next;
      }
      nodes_.push_back(Node{0, 0, 0, 0, byte});
      pending.push_back({pos, next, run.depth + 1});
      ++nodes_[index].n_children;
      pos = next;
    }
  }
}

}  // namespace petrel
