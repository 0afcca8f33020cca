// Device memory: a caching allocator over the runtime's cudaMalloc/cudaFree, and the buffers the
// backend hands out. Freed blocks go to a free list of their size bucket and are reused by the
// next request of that bucket, so per-batch scratch (matmul and attention partials, the batch's
// arrays) costs no driver call after the first batches; everything cached is released when the
// allocator is destroyed or when an allocation fails (then the request is retried once).
//
// Reuse is safe without waiting for the device because the backend runs everything on one
// stream: work that used a block is ordered before work that uses it again.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "core/base/status.h"
#include "core/runtime/backend.h"

namespace petrel::cuda {

// Where the bytes come from: the device (cudaMalloc) in the backend, plain host memory in tests.
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  virtual Result<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
};

// The size a request is served with: small requests (up to 1 MiB) round up to a power of two (at
// least 256 bytes, the alignment every value needs), larger ones to whole 2 MiB, so a bucket
// wastes at most half of a small block and under 2 MiB of a large one.
size_t BucketBytes(size_t bytes);

class CachingAllocator {
 public:
  explicit CachingAllocator(std::unique_ptr<RawMemory> raw) : raw_(std::move(raw)) {}
  ~CachingAllocator() { ReleaseCached(); }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (BucketBytes(bytes) exactly): a cached one when there is one.
  Result<void*> Take(size_t bytes);
  // Returns a block of BucketBytes(bytes) to its free list.
  void Give(void* ptr, size_t bytes);
  // Frees every cached block.
  void ReleaseCached();
  // Blocks that live as long as the backend (weights): exactly `bytes` rounded up to 256, from
  // and back to the raw memory, so a model's weights take no bucket rounding.
  Result<void*> TakeLasting(size_t bytes);
  void GiveLasting(void* ptr, size_t bytes);

  size_t live_bytes() const { return live_bytes_; }
  size_t cached_bytes() const { return cached_bytes_; }
  size_t raw_allocations() const { return raw_allocations_; }

 private:
  std::unique_ptr<RawMemory> raw_;
  std::map<size_t, std::vector<void*>> free_;  // bucket bytes -> cached blocks
  size_t live_bytes_ = 0, cached_bytes_ = 0, raw_allocations_ = 0;
};

// Device memory the backend hands out (values, KV layers, weights): a block of the allocator,
// given back when the buffer is destroyed.
class DeviceBuffer final : public BackendBuffer {
 public:
  DeviceBuffer(CachingAllocator& owner, void* ptr, size_t bytes, bool lasting)
      : owner_(owner), ptr_(ptr), bytes_(bytes), lasting_(lasting) {}
  ~DeviceBuffer() override {
    if (lasting_) {
      owner_.GiveLasting(ptr_, bytes_);
    } else {
      owner_.Give(ptr_, bytes_);
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  size_t bytes() const override { return bytes_; }
  char* data() const { return static_cast<char*>(ptr_); }

  static Result<std::unique_ptr<DeviceBuffer>> Make(CachingAllocator& allocator, size_t bytes);
  static Result<std::unique_ptr<DeviceBuffer>> MakeLasting(CachingAllocator& allocator,
                                                           size_t bytes);

 private:
  CachingAllocator& owner_;
  void* ptr_;
  size_t bytes_;
  bool lasting_;
};

}  // namespace petrel::cuda
