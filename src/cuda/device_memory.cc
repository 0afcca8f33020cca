#include "cuda/device_memory.h"

#include <algorithm>
#include <cstdint>

namespace petrel::cuda {
namespace {

constexpr size_t kMinBlock = 256;
constexpr size_t kSmallLimit = size_t(1) << 20;
constexpr size_t kLargeGranule = size_t(2) << 20;

}  // namespace

size_t BucketBytes(size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  if (bytes <= kSmallLimit) {
    size_t bucket = kMinBlock;
    while (bucket < bytes) bucket *= 2;
    return bucket;
  }
  if (bytes > SIZE_MAX - kLargeGranule) return SIZE_MAX;  // no such allocation will succeed
  return (bytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
}

Result<void*> CachingAllocator::Take(size_t bytes) {
  const size_t bucket = BucketBytes(bytes);
  auto cached = free_.find(bucket);
  if (cached != free_.end() && !cached->second.empty()) {
    void* ptr = cached->second.back();
    cached->second.pop_back();
    cached_bytes_ -= bucket;
    live_bytes_ += bucket;
    return ptr;
  }
  auto fresh = raw_->Allocate(bucket);
  if (!fresh.ok() && cached_bytes_ > 0) {
    // The cache may hold what the device lacks: give it back and try once more.
    ReleaseCached();
    fresh = raw_->Allocate(bucket);
  }
  if (!fresh.ok()) return fresh.status();
  ++raw_allocations_;
  live_bytes_ += bucket;
  return *fresh;
}

void CachingAllocator::Give(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const size_t bucket = BucketBytes(bytes);
  free_[bucket].push_back(ptr);
  live_bytes_ -= bucket;
  cached_bytes_ += bucket;
}

void CachingAllocator::ReleaseCached() {
  for (auto& [bucket, blocks] : free_) {
    for (void* ptr : blocks) raw_->Free(ptr);
  }
  free_.clear();
  cached_bytes_ = 0;
}

Result<void*> CachingAllocator::TakeLasting(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + kMinBlock - 1) / kMinBlock * kMinBlock;
  auto fresh = raw_->Allocate(rounded);
  if (!fresh.ok() && cached_bytes_ > 0) {
    ReleaseCached();
    fresh = raw_->Allocate(rounded);
  }
  if (!fresh.ok()) return fresh.status();
  ++raw_allocations_;
  live_bytes_ += rounded;
  return *fresh;
}

void CachingAllocator::GiveLasting(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  raw_->Free(ptr);
  live_bytes_ -= (std::max<size_t>(bytes, 1) + kMinBlock - 1) / kMinBlock * kMinBlock;
}

Result<std::unique_ptr<DeviceBuffer>> DeviceBuffer::Make(CachingAllocator& allocator,
                                                         size_t bytes) {
  PETREL_ASSIGN_OR_RETURN(void* ptr, allocator.Take(bytes));
  return std::make_unique<DeviceBuffer>(allocator, ptr, bytes, false);
}

Result<std::unique_ptr<DeviceBuffer>> DeviceBuffer::MakeLasting(CachingAllocator& allocator,
                                                                size_t bytes) {
  PETREL_ASSIGN_OR_RETURN(void* ptr, allocator.TakeLasting(bytes));
  return std::make_unique<DeviceBuffer>(allocator, ptr, bytes, true);
}

}  // namespace petrel::cuda
