// What an op's launch function is given: the stream and cuBLAS handle, the allocator (for
// scratch), the batch (host arrays and their device copies), and the device memory behind
// values, weights and KV storage.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/graph/graph.h"
#include "core/runtime/backend.h"
#include "cuda/batch_arrays.h"
#include "cuda/device_memory.h"

namespace petrel::cuda {

// Every BackendBuffer this backend hands out is a DeviceBuffer, and PrepareWeight's views point
// at one.
inline const DeviceBuffer& AsDevice(const BackendBuffer& buffer) {
  return static_cast<const DeviceBuffer&>(buffer);
}
inline float* ValuePtr(const ValueView& value) {
  return reinterpret_cast<float*>(AsDevice(*value.buffer).data() + value.offset);
}
inline const void* WeightPtr(const TensorView& weight) {
  return static_cast<const DeviceBuffer*>(weight.data)->data();
}
inline const float* WeightF32(const TensorView& weight) {
  return static_cast<const float*>(WeightPtr(weight));
}

// Device scratch for one op, given back to the allocator when the op's launches are queued: the
// next user of the block is ordered after them on the one stream.
class Scratch {
 public:
  explicit Scratch(CachingAllocator& allocator) : allocator_(allocator) {}
  ~Scratch() { allocator_.Give(ptr_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Status Take(size_t bytes) {
    if (bytes == 0) return Status::Ok();
    PETREL_ASSIGN_OR_RETURN(ptr_, allocator_.Take(bytes));
    bytes_ = bytes;
    return Status::Ok();
  }
  void* data() const { return ptr_; }
  float* floats() const { return static_cast<float*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  CachingAllocator& allocator_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct OpContext {
  cudaStream_t stream;
  cublasHandle_t cublas;
  CachingAllocator& allocator;
  const BatchContext& batch;
  const DeviceBatch& device_batch;
  // The device copy of a RoPE frequency table (pairs doubles), uploaded on first use and kept
  // for the backend's life (the model owns the table and outlives the backend's batches).
  Result<const double*> (*rope_table)(void* backend, const double* inv_freq, size_t pairs);
  void* backend;
  Result<const double*> RopeTable(const double* inv_freq, size_t pairs) const {
    return rope_table(backend, inv_freq, pairs);
  }
};

// A launch's error as one line naming the op and layer.
Status LaunchStatus(cudaError_t error, const Node& node);

}  // namespace petrel::cuda
