// The unified paged KV cache: fixed-size blocks, per-sequence block tables and reference counts
// on the host; each layer's K/V storage on that layer's backend.
//
// Prefix caching: a full block whose tokens are known (CacheBlocks) is registered under a hash
// of (its parent block's hash, its token ids). A new sequence whose tokens start with registered
// blocks shares them (NewSequenceFromPrefix) instead of computing them again. A registered block
// no sequence uses stays cached, counted as free, and is reused least-recently-released first
// when free blocks run out. A hash only finds a candidate: the candidate's token ids and its
// parent block are compared, so a collision can never hand out the wrong K/V.
//
// Each sequence has a prefix key, the identity of whatever else decides its K/V besides its
// tokens (the LoRA adapters applied to it and their scales; 0: none). It seeds the hash chain
// and is kept with every registered block, so a prefix computed under one key is never found
// under another.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
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
  // false: each layer keeps K rows only (latent attention reads its values from the latent
  // row), half the memory of K and V rows of the same width.
  bool values = true;
  // Every byte written once when the cache is made, so that its pages are real memory before
  // the first request: a server's pool, whose first requests would otherwise pay a page fault
  // every 4 KiB of the rows they append (12 % of a 32-stream server's CPU time over a short run).
  bool touch = false;
};

struct KvPrefixMatch {
  size_t blocks = 0;       // registered blocks that continue the tokens from the start
  size_t idle_blocks = 0;  // of which no sequence uses now (they count as free)
};

class KvCache {
 public:
  // `layer_backends[l]` holds layer l's storage; null: none here (a block another pipeline
  // stage runs), so the block tables still count every layer but only these are allocated.
  static Result<std::unique_ptr<KvCache>> Create(const std::vector<Backend*>& layer_backends,
                                                 size_t kv_row_elems,
                                                 const KvCacheOptions& options);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Sequences.
  SeqId NewSequence(uint64_t prefix_key = 0);
  // A new sequence of prefix key `prefix_key` holding the longest run of blocks registered
  // under that key that `tokens` starts with; `reused_tokens` (if given) gets how many tokens
  // that is (a multiple of block_tokens()).
  SeqId NewSequenceFromPrefix(std::span<const int32_t> tokens, size_t* reused_tokens,
                              uint64_t prefix_key = 0);
  KvPrefixMatch FindPrefix(std::span<const int32_t> tokens, uint64_t prefix_key = 0) const;
  // Changes the prefix key of an empty sequence (its K/V would otherwise mix two keys).
  Status SetPrefixKey(SeqId seq, uint64_t prefix_key);
  // Registers the full blocks of `seq` not registered yet; `tokens` are its tokens from position
  // 0 (at most Length(seq)); a negative id (unknown) ends the registration there.
  void CacheBlocks(SeqId seq, std::span<const int32_t> tokens);
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
  // Blocks Append(seq, n_new) would take (0 for a sequence that does not exist).
  size_t BlocksToAppend(SeqId seq, size_t n_new) const;

  // Copies positions [0, Length(seq)) of one layer's K and V rows to/from host buffers of
  // Length(seq) * row_bytes() bytes each (session files); a cache without V rows leaves v_out
  // as it is and ignores v_in.
  Status ReadRows(SeqId seq, size_t layer, uint8_t* k_out, uint8_t* v_out) const;
  // Where a sequence's rows lie in host memory, read in place: per layer its K, then its V rows,
  // a span per block in position order. Empty when a layer is in device memory or in another
  // pipeline stage (or the sequence does not exist).
  std::vector<std::span<const uint8_t>> HostRows(SeqId seq) const;
  Status WriteRows(SeqId seq, size_t layer, const uint8_t* k_in, const uint8_t* v_in);
  size_t row_bytes() const { return row_bytes_; }
  DType dtype() const { return options_.dtype; }

  // Layer `layer`'s storage, on that layer's backend.
  const KvLayerView& LayerView(size_t layer) const { return layers_[layer].view; }
  size_t n_layers() const { return layers_.size(); }
  // Free blocks, registered blocks that no sequence uses included (they are evicted on demand).
  size_t free_blocks() const { return free_.size() + idle_cached_; }
  size_t cached_blocks() const { return idle_cached_; }  // registered, unused, still held
  size_t total_blocks() const { return options_.n_blocks; }
  size_t block_tokens() const { return options_.block_tokens; }
  size_t context() const { return options_.context; }
  size_t bytes() const;  // the layers held here, K and V
  bool has_values() const { return options_.values; }

 private:
  struct Layer {
    std::unique_ptr<BackendBuffer> k, v;
    KvLayerView view;
    Backend* backend = nullptr;
  };
  struct Sequence {
    std::vector<int32_t> blocks;
    size_t length = 0;
    size_t registered = 0;  // leading blocks registered in the prefix cache
    uint64_t prefix_key = 0;
  };
  // A block's prefix-cache entry; `generation` changes whenever the block is registered anew,
  // so that a child can tell its parent from a later reuse of the same block.
  struct BlockInfo {
    uint64_t hash = 0;
    uint64_t prefix_key = 0;  // of the sequence that registered it
    bool registered = false;
    int32_t parent = -1;
    uint32_t parent_generation = 0;
    uint32_t generation = 0;
    int32_t lru_prev = -1, lru_next = -1;  // among idle registered blocks
  };
  KvCache() = default;
  Status CopyBlock(int32_t from, int32_t to);
  // A free block: from the free list, else the least recently released idle registered one.
  int32_t TakeBlock();
  void Release(int32_t block);  // refcount--, and to the free list or the idle list at 0
  void Acquire(int32_t block);  // refcount++, off the idle list
  void Unregister(int32_t block);
  void LruPushBack(int32_t block);
  void LruRemove(int32_t block);
  // The registered block holding `tokens` after `parent` (-1: at position 0) under
  // `prefix_key`, or -1.
  int32_t Lookup(int32_t parent, std::span<const int32_t> tokens, uint64_t prefix_key,
                 uint64_t* hash) const;
  std::span<const int32_t> BlockTokens(int32_t block) const {
    return std::span<const int32_t>(block_tokens_).subspan(size_t(block) * options_.block_tokens,
                                                           options_.block_tokens);
  }

  KvCacheOptions options_;
  size_t row_bytes_ = 0;
  std::vector<Layer> layers_;
  std::vector<int32_t> free_;       // free block ids (LIFO)
  std::vector<int32_t> refcount_;   // per block
  std::vector<BlockInfo> info_;     // per block
  std::vector<int32_t> block_tokens_;  // token ids of registered blocks (block_tokens per block)
  std::unordered_map<uint64_t, int32_t> by_hash_;  // registered blocks
  int32_t lru_head_ = -1, lru_tail_ = -1;          // idle registered blocks, oldest first
  size_t idle_cached_ = 0;
  std::map<SeqId, Sequence> seqs_;
  SeqId next_seq_ = 0;
};

}  // namespace petrel
