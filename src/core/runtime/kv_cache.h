// The unified paged KV cache: fixed-size blocks, per-sequence block tables and reference counts
// on the host; each layer's K/V storage on that layer's backend.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/base/status.h"
#include "core/runtime/backend.h"  // Backend, KvLayerView
#include "core/runtime/batch.h"    // SeqId

namespace petrel {

struct KvCacheOptions {
  size_t block_tokens = 16;  // tokens per block
  size_t n_blocks = 0;       // blocks per layer (0: enough for `context` tokens of one sequence)
  size_t context = 2048;     // tokens per sequence at most
  DType dtype = DType::kF32; // kF32, kF16 or kQ8_0 (heads must be whole Q8_0 blocks)
};

class KvCache {
 public:
  // `layer_backends[l]` holds layer l's storage.
  static Result<std::unique_ptr<KvCache>> Create(const std::vector<Backend*>& layer_backends,
                                                 size_t kv_row_elems,
                                                 const KvCacheOptions& options);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Sequences.
  SeqId NewSequence();
  void FreeSequence(SeqId seq);     // returns its blocks (shared ones only when last user)
  Result<SeqId> Fork(SeqId seq);    // shares every block (refcount++); writes copy on write
  bool HasSequence(SeqId seq) const { return seqs_.count(seq) != 0; }
  size_t Length(SeqId seq) const;   // tokens stored
  // Drops tokens past `length` (for example to re-run a turn); frees blocks no longer used.
  Status Truncate(SeqId seq, size_t length);

  // Makes room for `n_new` more tokens of `seq` and returns, per new token, its flat slot
  // (block * block_tokens + offset). Fails when blocks run out or the context is exceeded;
  // nothing changes then.
  Result<std::vector<int32_t>> Append(SeqId seq, size_t n_new);
  // The same, appending the slots to `slots` (no allocation once it has grown).
  Status Append(SeqId seq, size_t n_new, std::vector<int32_t>* slots);
  const std::vector<int32_t>& BlockTable(SeqId seq) const;

  // Copies positions [0, Length(seq)) of one layer's K and V rows to/from host buffers of
  // Length(seq) * row_bytes() bytes each (session files).
  Status ReadRows(SeqId seq, size_t layer, uint8_t* k_out, uint8_t* v_out) const;
  Status WriteRows(SeqId seq, size_t layer, const uint8_t* k_in, const uint8_t* v_in);
  size_t row_bytes() const { return row_bytes_; }
  DType dtype() const { return options_.dtype; }

  // Layer `layer`'s storage, on that layer's backend.
  const KvLayerView& LayerView(size_t layer) const { return layers_[layer].view; }
  size_t n_layers() const { return layers_.size(); }
  size_t free_blocks() const { return free_.size(); }
  size_t total_blocks() const { return options_.n_blocks; }
  size_t block_tokens() const { return options_.block_tokens; }
  size_t context() const { return options_.context; }
  size_t bytes() const;  // all layers, K and V

 private:
  struct Layer {
    std::unique_ptr<BackendBuffer> k, v;
    KvLayerView view;
    Backend* backend = nullptr;
  };
  struct Sequence {
    std::vector<int32_t> blocks;
    size_t length = 0;
  };
  KvCache() = default;
  Status CopyBlock(int32_t from, int32_t to);

  KvCacheOptions options_;
  size_t row_bytes_ = 0;
  std::vector<Layer> layers_;
  std::vector<int32_t> free_;       // free block ids (LIFO)
  std::vector<int32_t> refcount_;   // per block
  std::map<SeqId, Sequence> seqs_;
  SeqId next_seq_ = 0;
};

}  // namespace petrel
