// A Batch: tokens of one or more sequences decoded together in one forward pass.
#pragma once

#include <cstdint>
#include <vector>

namespace petrel {

using SeqId = int32_t;

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;   // each sequence's tokens continue its KV cache in order
  std::vector<SeqId> seq_ids;
  std::vector<uint8_t> want_logits; // 1: return this token's logits
  // Return the final hidden states (model dim floats per wanted token: embeddings, before any
  // pooling) instead of the logits. Models without an output head take only such batches.
  bool hidden_output = false;

  void Add(int32_t token, int32_t position, SeqId seq, bool logits) {
    tokens.push_back(token);
    positions.push_back(position);
    seq_ids.push_back(seq);
    want_logits.push_back(logits ? 1 : 0);
  }
  size_t size() const { return tokens.size(); }
  void Clear() {
    tokens.clear();
    positions.clear();
    seq_ids.clear();
    want_logits.clear();
    hidden_output = false;
  }
};

}  // namespace petrel
