// KvCache: block allocation, block tables, copy-on-write on shared blocks.
#include "core/runtime/kv_cache.h"

#include <algorithm>
#include <vector>

namespace petrel {

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
    if (!backend->SupportsKv(options.dtype)) {
      return Error("backend %s does not support a %s KV cache", backend->Name(),
                   DTypeName(options.dtype));
    }
    Layer layer;
    layer.backend = backend;
    // A failed allocation names the layer, so that the caller can say which part did not fit.
    auto k = backend->Allocate(layer_bytes);
    auto v = k.ok() ? backend->Allocate(layer_bytes) : Result<std::unique_ptr<BackendBuffer>>(k.status());
    if (!v.ok()) {
      return Error("layer %zu: KV cache (2 x %.1f MiB) on %s: %s", l,
                   double(layer_bytes) / double(1 << 20), backend->Name(),
                   v.status().message().c_str());
    }
    layer.k = std::move(k).value();
    layer.v = std::move(v).value();
    layer.view.k = layer.k.get();
    layer.view.v = layer.v.get();
    layer.view.dtype = options.dtype;
    layer.view.block_tokens = options.block_tokens;
    layer.view.row_elems = kv_row_elems;
    cache->layers_.push_back(std::move(layer));
  }
  cache->refcount_.assign(n_blocks, 0);
  cache->free_.reserve(n_blocks);
  for (size_t b = n_blocks; b-- > 0;) cache->free_.push_back(int32_t(b));  // block 0 on top
  return cache;
}

SeqId KvCache::NewSequence() {
  const SeqId seq = next_seq_++;
  Sequence& s = seqs_[seq];
  // The whole context's block table up front, so that decode steps never grow it.
  s.blocks.reserve((options_.context + options_.block_tokens - 1) / options_.block_tokens);
  return seq;
}

void KvCache::FreeSequence(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (int32_t block : it->second.blocks) {
    if (--refcount_[size_t(block)] == 0) free_.push_back(block);
  }
  seqs_.erase(it);
}

Result<SeqId> KvCache::Fork(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return Error("sequence %d does not exist", seq);
  const SeqId child = next_seq_++;
  for (int32_t block : it->second.blocks) ++refcount_[size_t(block)];
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
    if (--refcount_[size_t(block)] == 0) free_.push_back(block);
  }
  s.length = length;
  return Status::Ok();
}

Status KvCache::CopyBlock(int32_t from, int32_t to) {
  const size_t block_bytes = options_.block_tokens * row_bytes_;
  for (Layer& layer : layers_) {
    for (BackendBuffer* buffer : {layer.k.get(), layer.v.get()}) {
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
  if (fresh > free_.size()) {
    return Error("KV cache is full: sequence %d needs %zu more blocks, %zu free", seq, fresh,
                 free_.size());
  }
  if (copy_last) {
    const int32_t shared = s.blocks.back();
    const int32_t own = free_.back();
    free_.pop_back();
    PETREL_RETURN_IF_ERROR(CopyBlock(shared, own));
    --refcount_[size_t(shared)];
    refcount_[size_t(own)] = 1;
    s.blocks.back() = own;
  }
  while (s.blocks.size() < needed_blocks) {
    const int32_t block = free_.back();
    free_.pop_back();
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

size_t KvCache::bytes() const {
  return layers_.size() * 2 * options_.n_blocks * options_.block_tokens * row_bytes_;
}

Status KvCache::ReadRows(SeqId seq, size_t layer, uint8_t* k_out, uint8_t* v_out) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return Error("sequence %d does not exist", seq);
  if (layer >= layers_.size()) return Error("layer %zu does not exist", layer);
  const Layer& L = layers_[layer];
  const size_t bt = options_.block_tokens;
  for (size_t pos = 0; pos < it->second.length; ++pos) {
    const size_t slot = size_t(it->second.blocks[pos / bt]) * bt + pos % bt;
    PETREL_RETURN_IF_ERROR(L.backend->CopyToHost(*L.k, slot * row_bytes_, k_out + pos * row_bytes_, row_bytes_));
    PETREL_RETURN_IF_ERROR(L.backend->CopyToHost(*L.v, slot * row_bytes_, v_out + pos * row_bytes_, row_bytes_));
  }
  return L.backend->Synchronize();
}

Status KvCache::WriteRows(SeqId seq, size_t layer, const uint8_t* k_in, const uint8_t* v_in) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return Error("sequence %d does not exist", seq);
  if (layer >= layers_.size()) return Error("layer %zu does not exist", layer);
  Layer& L = layers_[layer];
  const size_t bt = options_.block_tokens;
  for (size_t pos = 0; pos < it->second.length; ++pos) {
    const int32_t block = it->second.blocks[pos / bt];
    if (refcount_[size_t(block)] > 1) return Error("sequence %d shares block %d; cannot overwrite it", seq, block);
  }
  for (size_t pos = 0; pos < it->second.length; ++pos) {
    const size_t slot = size_t(it->second.blocks[pos / bt]) * bt + pos % bt;
    PETREL_RETURN_IF_ERROR(L.backend->CopyFromHost(k_in + pos * row_bytes_, *L.k, slot * row_bytes_, row_bytes_));
    PETREL_RETURN_IF_ERROR(L.backend->CopyFromHost(v_in + pos * row_bytes_, *L.v, slot * row_bytes_, row_bytes_));
  }
  return L.backend->Synchronize();
}

}  // namespace petrel
