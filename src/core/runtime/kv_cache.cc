// KvCache: block allocation, block tables, copy-on-write on shared blocks, the prefix cache.
#include "core/runtime/kv_cache.h"

#include <algorithm>
#include <vector>

namespace petrel {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t BlockHash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t h = Mix(parent_hash + 0x9e3779b97f4a7c15ull);
  for (int32_t token : tokens) h = Mix(h ^ uint64_t(uint32_t(token)));
  return h;
}

constexpr uint64_t kRootHash = 0x70657472656c6b76ull;

// The parent hash of a sequence's first block: the prefix key starts the chain.
uint64_t RootHash(uint64_t prefix_key) {
  return prefix_key == 0 ? kRootHash : Mix(kRootHash ^ Mix(prefix_key));
}

// Writes zeros over a whole buffer, a slice at a time.
Status Zero(Backend& backend, BackendBuffer& buffer) {
  static const std::vector<uint8_t> zeros(size_t(1) << 20);
  for (size_t offset = 0; offset < buffer.bytes(); offset += zeros.size()) {
    PETREL_RETURN_IF_ERROR(backend.CopyFromHost(
        zeros.data(), buffer, offset, std::min(zeros.size(), buffer.bytes() - offset)));
  }
  return backend.Synchronize();
}

}  // namespace

Result<std::unique_ptr<KvCache>> KvCache::Create(const std::vector<Backend*>& layer_backends,
                                                 size_t kv_row_elems,
                                                 const KvCacheOptions& options) {
  if (options.dtype != DType::kF32 && options.dtype != DType::kF16 && options.dtype != DType::kQ8_0) {
    return Error("KV cache type %s is not supported (use f32, f16 or q8_0)", DTypeName(options.dtype));
  }
  if (!RowBytes(options.dtype, kv_row_elems)) {
    return Error("KV cache type %s needs rows of whole %u-element blocks; this model's are %zu",
                 DTypeName(options.dtype), Traits(options.dtype).block_elems, kv_row_elems);
  }
  if (options.block_tokens == 0 || options.block_tokens > 4096) {
    return Error("KV block size %zu is invalid", options.block_tokens);
  }
  if (options.context == 0) return Error("context size must be positive");
  std::unique_ptr<KvCache> cache(new KvCache());
  cache->options_ = options;
  if (cache->options_.n_blocks == 0) {
    cache->options_.n_blocks = (options.context + options.block_tokens - 1) / options.block_tokens;
  }
  const size_t n_blocks = cache->options_.n_blocks;
  if (n_blocks > (size_t(1) << 30)) return Error("KV block count %zu is too large", n_blocks);
  cache->row_bytes_ = size_t(*RowBytes(options.dtype, kv_row_elems));
  const size_t layer_bytes = n_blocks * options.block_tokens * cache->row_bytes_;
  for (size_t l = 0; l < layer_backends.size(); ++l) {
    Backend* backend = layer_backends[l];
    if (!backend) {  // a block another pipeline stage runs: no storage here
      cache->layers_.emplace_back();
      continue;
    }
    if (!backend->SupportsKv(options.dtype)) {
      return Error("backend %s does not support a %s KV cache", backend->Name(),
                   DTypeName(options.dtype));
    }
    Layer layer;
    layer.backend = backend;
    // A failed allocation names the layer, so that the caller can say which part did not fit.
    auto k = backend->Allocate(layer_bytes);
    auto v = !k.ok()           ? Result<std::unique_ptr<BackendBuffer>>(k.status())
             : options.values ? backend->Allocate(layer_bytes)
                              : Result<std::unique_ptr<BackendBuffer>>(nullptr);
    if (!v.ok()) {
      return Error("layer %zu: KV cache (%d x %.1f MiB) on %s: %s", l, options.values ? 2 : 1,
                   double(layer_bytes) / double(1 << 20), backend->Name(),
                   v.status().message().c_str());
    }
    layer.k = std::move(k).value();
    layer.v = std::move(v).value();
    if (options.touch) {
      for (BackendBuffer* buffer : {layer.k.get(), layer.v.get()}) {
        if (buffer != nullptr) PETREL_RETURN_IF_ERROR(Zero(*backend, *buffer));
      }
    }
    layer.view.k = layer.k.get();
    layer.view.v = layer.v.get();
    layer.view.dtype = options.dtype;
    layer.view.block_tokens = options.block_tokens;
    layer.view.row_elems = kv_row_elems;
    cache->layers_.push_back(std::move(layer));
  }
  cache->refcount_.assign(n_blocks, 0);
  cache->info_.assign(n_blocks, BlockInfo());
  cache->block_tokens_.assign(n_blocks * options.block_tokens, -1);
  cache->free_.reserve(n_blocks);
  for (size_t b = n_blocks; b-- > 0;) cache->free_.push_back(int32_t(b));  // block 0 on top
  return cache;
}

SeqId KvCache::NewSequence(uint64_t prefix_key) {
  const SeqId seq = next_seq_++;
  Sequence& s = seqs_[seq];
  s.prefix_key = prefix_key;
  // The whole context's block table up front, so that decode steps never grow it.
  s.blocks.reserve((options_.context + options_.block_tokens - 1) / options_.block_tokens);
  return seq;
}

Status KvCache::SetPrefixKey(SeqId seq, uint64_t prefix_key) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return Error("sequence %d does not exist", seq);
  if (it->second.prefix_key == prefix_key) return Status::Ok();
  if (it->second.length != 0) {
    return Error("sequence %d already holds %zu tokens computed under other adapters", seq,
                 it->second.length);
  }
  it->second.prefix_key = prefix_key;
  return Status::Ok();
}

void KvCache::FreeSequence(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  // Last block first: idle blocks are evicted in release order, and a block evicted before
  // its children would leave them unreachable.
  const std::vector<int32_t>& blocks = it->second.blocks;
  for (size_t i = blocks.size(); i-- > 0;) Release(blocks[i]);
  seqs_.erase(it);
}

void KvCache::LruPushBack(int32_t block) {
  BlockInfo& info = info_[size_t(block)];
  info.lru_prev = lru_tail_;
  info.lru_next = -1;
  if (lru_tail_ >= 0) {
    info_[size_t(lru_tail_)].lru_next = block;
  } else {
    lru_head_ = block;
  }
  lru_tail_ = block;
  ++idle_cached_;
}

void KvCache::LruRemove(int32_t block) {
  BlockInfo& info = info_[size_t(block)];
  if (info.lru_prev >= 0) {
    info_[size_t(info.lru_prev)].lru_next = info.lru_next;
  } else {
    lru_head_ = info.lru_next;
  }
  if (info.lru_next >= 0) {
    info_[size_t(info.lru_next)].lru_prev = info.lru_prev;
  } else {
    lru_tail_ = info.lru_prev;
  }
  info.lru_prev = info.lru_next = -1;
  --idle_cached_;
}

void KvCache::Release(int32_t block) {
  if (--refcount_[size_t(block)] != 0) return;
  if (info_[size_t(block)].registered) {
    LruPushBack(block);
  } else {
    free_.push_back(block);
  }
}

void KvCache::Acquire(int32_t block) {
  if (refcount_[size_t(block)]++ == 0 && info_[size_t(block)].registered) LruRemove(block);
}

void KvCache::Unregister(int32_t block) {
  BlockInfo& info = info_[size_t(block)];
  if (!info.registered) return;
  auto it = by_hash_.find(info.hash);
  if (it != by_hash_.end() && it->second == block) by_hash_.erase(it);
  info.registered = false;
}

int32_t KvCache::TakeBlock() {
  if (!free_.empty()) {
    const int32_t block = free_.back();
    free_.pop_back();
    return block;
  }
  const int32_t block = lru_head_;
  PETREL_CHECK(block >= 0);  // callers check free_blocks() first
  LruRemove(block);
  Unregister(block);
  return block;
}

int32_t KvCache::Lookup(int32_t parent, std::span<const int32_t> tokens, uint64_t prefix_key,
                        uint64_t* hash) const {
  const uint64_t h =
      BlockHash(parent < 0 ? RootHash(prefix_key) : info_[size_t(parent)].hash, tokens);
  if (hash) *hash = h;
  auto it = by_hash_.find(h);
  if (it == by_hash_.end()) return -1;
  const int32_t block = it->second;
  const BlockInfo& info = info_[size_t(block)];
  // The hash only finds a candidate; its parent and its tokens decide.
  if (!info.registered || info.parent != parent || info.prefix_key != prefix_key) return -1;
  if (parent >= 0 && info.parent_generation != info_[size_t(parent)].generation) return -1;
  const std::span<const int32_t> held = BlockTokens(block);
  if (!std::equal(held.begin(), held.end(), tokens.begin(), tokens.end())) return -1;
  return block;
}

KvPrefixMatch KvCache::FindPrefix(std::span<const int32_t> tokens, uint64_t prefix_key) const {
  KvPrefixMatch match;
  const size_t bt = options_.block_tokens;
  const size_t limit = std::min(tokens.size(), options_.context);
  int32_t parent = -1;
  for (size_t i = 0; (i + 1) * bt <= limit; ++i) {
    const int32_t block = Lookup(parent, tokens.subspan(i * bt, bt), prefix_key, nullptr);
    if (block < 0) break;
    ++match.blocks;
    if (refcount_[size_t(block)] == 0) ++match.idle_blocks;
    parent = block;
  }
  return match;
}

SeqId KvCache::NewSequenceFromPrefix(std::span<const int32_t> tokens, size_t* reused_tokens,
                                     uint64_t prefix_key) {
  const SeqId seq = NewSequence(prefix_key);
  Sequence& s = seqs_[seq];
  const size_t bt = options_.block_tokens;
  const size_t limit = std::min(tokens.size(), options_.context);
  int32_t parent = -1;
  for (size_t i = 0; (i + 1) * bt <= limit; ++i) {
    const int32_t block = Lookup(parent, tokens.subspan(i * bt, bt), prefix_key, nullptr);
    if (block < 0) break;
    Acquire(block);
    s.blocks.push_back(block);
    parent = block;
  }
  s.length = s.blocks.size() * bt;
  s.registered = s.blocks.size();
  if (reused_tokens) *reused_tokens = s.length;
  return seq;
}

void KvCache::CacheBlocks(SeqId seq, std::span<const int32_t> tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  Sequence& s = it->second;
  const size_t bt = options_.block_tokens;
  const size_t full = std::min(tokens.size(), s.length) / bt;
  for (; s.registered < full; ++s.registered) {
    const size_t i = s.registered;
    const int32_t block = s.blocks[i];
    BlockInfo& info = info_[size_t(block)];
    if (info.registered) continue;  // shared with the sequence that registered it
    const std::span<const int32_t> block_tokens = tokens.subspan(i * bt, bt);
    if (std::any_of(block_tokens.begin(), block_tokens.end(), [](int32_t t) { return t < 0; })) {
      return;  // unknown tokens: nothing past them can be registered either
    }
    const int32_t parent = i == 0 ? -1 : s.blocks[i - 1];
    // Under a parent that is not registered (another block holds the same tokens) a block
    // could never be found.
    if (parent >= 0 && !info_[size_t(parent)].registered) continue;
    uint64_t hash = 0;
    if (Lookup(parent, block_tokens, s.prefix_key, &hash) >= 0 || by_hash_.count(hash) != 0) {
      continue;  // the same tokens are already cached in another block, or a hash collision
    }
    info.hash = hash;
    info.prefix_key = s.prefix_key;
    info.registered = true;
    info.parent = parent;
    info.parent_generation = parent < 0 ? 0 : info_[size_t(parent)].generation;
    ++info.generation;
    std::copy(block_tokens.begin(), block_tokens.end(),
              block_tokens_.begin() + long(size_t(block) * bt));
    by_hash_.emplace(hash, block);
  }
}

Result<SeqId> KvCache::Fork(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return Error("sequence %d does not exist", seq);
  const SeqId child = next_seq_++;
  for (int32_t block : it->second.blocks) Acquire(block);
  Sequence& copy = seqs_[child];
  copy = it->second;
  copy.blocks.reserve((options_.context + options_.block_tokens - 1) / options_.block_tokens);
  return child;
}

size_t KvCache::Length(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

const std::vector<int32_t>& KvCache::BlockTable(SeqId seq) const {
  static const std::vector<int32_t> kEmpty;
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? kEmpty : it->second.blocks;
}

Status KvCache::Truncate(SeqId seq, size_t length) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return Error("sequence %d does not exist", seq);
  Sequence& s = it->second;
  if (length > s.length)
    return Error("cannot truncate sequence %d of %zu tokens to %zu", seq, s.length, length);
  const size_t keep_blocks = (length + options_.block_tokens - 1) / options_.block_tokens;
  while (s.blocks.size() > keep_blocks) {
    const int32_t block = s.blocks.back();
    s.blocks.pop_back();
    Release(block);
  }
  s.length = length;
  s.registered = std::min(s.registered, length / options_.block_tokens);
  return Status::Ok();
}

Status KvCache::CopyBlock(int32_t from, int32_t to) {
  const size_t block_bytes = options_.block_tokens * row_bytes_;
  for (Layer& layer : layers_) {
    for (BackendBuffer* buffer : {layer.k.get(), layer.v.get()}) {
      if (!buffer) continue;  // a cache without V rows, or a block of another stage
      PETREL_RETURN_IF_ERROR(layer.backend->CopyWithin(*buffer, size_t(from) * block_bytes, *buffer,
                                                       size_t(to) * block_bytes, block_bytes));
    }
  }
  return Status::Ok();
}

Result<std::vector<int32_t>> KvCache::Append(SeqId seq, size_t n_new) {
  std::vector<int32_t> slots;
  PETREL_RETURN_IF_ERROR(Append(seq, n_new, &slots));
  return slots;
}

Status KvCache::Append(SeqId seq, size_t n_new, std::vector<int32_t>* slots) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return Error("sequence %d does not exist", seq);
  Sequence& s = it->second;
  const size_t new_length = s.length + n_new;
  if (new_length > options_.context) {
    return Error("sequence %d: %zu tokens exceed the context of %zu", seq, new_length,
                 options_.context);
  }
  const size_t bt = options_.block_tokens;
  const size_t needed_blocks = (new_length + bt - 1) / bt;
  // A partly filled, shared last block is written to, so it needs its own copy.
  const bool copy_last = n_new > 0 && s.length % bt != 0 && refcount_[size_t(s.blocks.back())] > 1;
  const size_t fresh = needed_blocks - s.blocks.size() + (copy_last ? 1 : 0);
  if (fresh > free_blocks()) {
    return Error("KV cache is full: sequence %d needs %zu more blocks, %zu free", seq, fresh,
                 free_blocks());
  }
  if (copy_last) {
    const int32_t shared = s.blocks.back();
    const int32_t own = TakeBlock();
    PETREL_RETURN_IF_ERROR(CopyBlock(shared, own));
    Release(shared);
    refcount_[size_t(own)] = 1;
    s.blocks.back() = own;
  } else if (n_new > 0 && s.length % bt != 0) {
    // A registered block truncated into and written again no longer holds its tokens.
    Unregister(s.blocks.back());
  }
  while (s.blocks.size() < needed_blocks) {
    const int32_t block = TakeBlock();
    refcount_[size_t(block)] = 1;
    s.blocks.push_back(block);
  }
  for (size_t i = 0; i < n_new; ++i) {
    const size_t pos = s.length + i;
    slots->push_back(int32_t(size_t(s.blocks[pos / bt]) * bt + pos % bt));
  }
  s.length = new_length;
  return Status::Ok();
}

size_t KvCache::BlocksToAppend(SeqId seq, size_t n_new) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || n_new == 0) return 0;
  const Sequence& s = it->second;
  const size_t bt = options_.block_tokens;
  const size_t needed = (s.length + n_new + bt - 1) / bt;
  const bool copy_last = s.length % bt != 0 && refcount_[size_t(s.blocks.back())] > 1;
  return needed - std::min(needed, s.blocks.size()) + (copy_last ? 1 : 0);
}

size_t KvCache::bytes() const {
  size_t held = 0;  // the layers with storage here (a pipeline stage holds only its own)
  for (const Layer& layer : layers_) held += layer.k ? 1 : 0;
  return held * (options_.values ? 2 : 1) * options_.n_blocks * options_.block_tokens * row_bytes_;
}

Status KvCache::ReadRows(SeqId seq, size_t layer, uint8_t* k_out, uint8_t* v_out) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return Error("sequence %d does not exist", seq);
  if (layer >= layers_.size()) return Error("layer %zu does not exist", layer);
  const Layer& L = layers_[layer];
  if (!L.k) return Error("layer %zu runs in another pipeline stage", layer);
  const size_t bt = options_.block_tokens;
  for (size_t pos = 0; pos < it->second.length; ++pos) {
    const size_t slot = size_t(it->second.blocks[pos / bt]) * bt + pos % bt;
    PETREL_RETURN_IF_ERROR(L.backend->CopyToHost(*L.k, slot * row_bytes_, k_out + pos * row_bytes_, row_bytes_));
    if (!L.v) continue;
    PETREL_RETURN_IF_ERROR(L.backend->CopyToHost(*L.v, slot * row_bytes_, v_out + pos * row_bytes_, row_bytes_));
  }
  return L.backend->Synchronize();
}

std::vector<std::span<const uint8_t>> KvCache::HostRows(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return {};
  const size_t bt = options_.block_tokens, length = it->second.length;
  std::vector<std::span<const uint8_t>> rows;
  for (const Layer& L : layers_) {
    if (!L.k) return {};
    for (const BackendBuffer* buffer : {L.k.get(), L.v.get()}) {
      if (buffer == nullptr) continue;  // K (latent) rows only
      const uint8_t* base = buffer->host_bytes();
      if (base == nullptr) return {};
      for (size_t pos = 0; pos < length; pos += bt) {
        const size_t block = size_t(it->second.blocks[pos / bt]);
        rows.emplace_back(base + block * bt * row_bytes_, std::min(bt, length - pos) * row_bytes_);
      }
    }
  }
  return rows;
}

Status KvCache::WriteRows(SeqId seq, size_t layer, const uint8_t* k_in, const uint8_t* v_in) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return Error("sequence %d does not exist", seq);
  if (layer >= layers_.size()) return Error("layer %zu does not exist", layer);
  Layer& L = layers_[layer];
  if (!L.k) return Error("layer %zu runs in another pipeline stage", layer);
  const size_t bt = options_.block_tokens;
  for (size_t pos = 0; pos < it->second.length; ++pos) {
    const int32_t block = it->second.blocks[pos / bt];
    if (refcount_[size_t(block)] > 1) return Error("sequence %d shares block %d; cannot overwrite it", seq, block);
  }
  for (int32_t block : it->second.blocks) Unregister(block);  // their contents change
  it->second.registered = 0;
  for (size_t pos = 0; pos < it->second.length; ++pos) {
    const size_t slot = size_t(it->second.blocks[pos / bt]) * bt + pos % bt;
    PETREL_RETURN_IF_ERROR(L.backend->CopyFromHost(k_in + pos * row_bytes_, *L.k, slot * row_bytes_, row_bytes_));
    if (!L.v) continue;
    PETREL_RETURN_IF_ERROR(L.backend->CopyFromHost(v_in + pos * row_bytes_, *L.v, slot * row_bytes_, row_bytes_));
  }
  return L.backend->Synchronize();
}

}  // namespace petrel
