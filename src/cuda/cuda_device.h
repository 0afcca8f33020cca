// Finding and opening NVIDIA devices through the CUDA runtime: what each is (name, memory,
// compute capability, peak memory bandwidth) and the stream and cuBLAS handle a backend runs on.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/runtime/backend_registry.h"

namespace petrel::cuda {

// A failed runtime call as one line: "cuda: <what>: <the runtime's message>".
Status CudaStatus(cudaError_t error, const char* what);

struct DeviceInfo {
  int index = 0;
  std::string name;
  size_t memory_bytes = 0;
  int cc_major = 0, cc_minor = 0;  // compute capability
  int multiprocessors = 0;
  bool integrated = false;      // shares memory with the host (Jetson-class devices)
  double peak_bandwidth = 0.0;  // bytes/s: memory clock x bus width x 2 (double data rate)
};

// The devices the runtime sees; "no CUDA device: <reason>" when the driver is missing or
// reports an error.
Result<std::vector<DeviceInfo>> EnumerateDevices();
DeviceDescription Describe(const DeviceInfo& info);
// The device -1 stands for: the one with the most memory (the first of equals).
size_t BestDevice(const std::vector<DeviceInfo>& devices);

// One opened device: made current for the calling thread, with a non-blocking stream and a
// cuBLAS handle bound to it.
class CudaDevice {
 public:
  static Result<std::unique_ptr<CudaDevice>> Open(int index);
  ~CudaDevice();
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  const DeviceInfo& info() const { return info_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  // Makes this device current on the calling thread (the engine may call from several threads).
  Status MakeCurrent() const;
  size_t FreeMemory() const;

 private:
  CudaDevice() = default;
  DeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
};

}  // namespace petrel::cuda
