// Rank-ordered BPE merging over token ids.
#include "core/tokenizer/bpe.h"

#include <queue>

namespace petrel::tok {
namespace {

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Candidate {
  int32_t rank;
  int32_t pos;  // index of the left symbol
  int32_t merged;
  bool operator<(const Candidate& other) const {  // std::priority_queue pops the largest
    if (rank != other.rank) return rank > other.rank;
    return pos > other.pos;
  }
};

}  // namespace

void BpeMerges::Add(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  map_.emplace(PairKey(left, right), Merge{rank, merged});
}

const BpeMerges::Merge* BpeMerges::Find(int32_t left, int32_t right) const {
  if (left < 0 || right < 0) return nullptr;
  const auto it = map_.find(PairKey(left, right));
  return it == map_.end() ? nullptr : &it->second;
}

void BpeMerges::Apply(std::vector<int32_t>* ids) const {
  std::vector<int32_t>& symbols = *ids;
  const auto n_symbols = static_cast<int32_t>(symbols.size());
  if (n_symbols < 2) return;
  std::vector<int32_t> prev(n_symbols), next(n_symbols);
  std::vector<bool> alive(n_symbols, true);
  std::priority_queue<Candidate> queue;
  for (int32_t i = 0; i < n_symbols; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n_symbols ? i + 1 : -1;
    if (i + 1 < n_symbols) {
      if (const Merge* merge = Find(symbols[i], symbols[i + 1])) {
        queue.push({merge->rank, i, merge->merged});
      }
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const int32_t right = next[top.pos];
    // Skip entries made stale by an earlier merge of either symbol.
    const Merge* current = Find(symbols[top.pos], symbols[right]);
    if (current == nullptr || current->merged != top.merged || current->rank != top.rank) continue;
    symbols[top.pos] = top.merged;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    if (prev[top.pos] >= 0) {
      if (const Merge* merge = Find(symbols[prev[top.pos]], symbols[top.pos])) {
        queue.push({merge->rank, prev[top.pos], merge->merged});
      }
    }
    if (next[top.pos] >= 0) {
      if (const Merge* merge = Find(symbols[top.pos], symbols[next[top.pos]])) {
        queue.push({merge->rank, top.pos, merge->merged});
      }
    }
  }
  size_t kept = 0;
  for (int32_t i = 0; i < n_symbols; ++i) {
    if (alive[i]) symbols[kept++] = symbols[i];
  }
  symbols.resize(kept);
}

}  // namespace petrel::tok
