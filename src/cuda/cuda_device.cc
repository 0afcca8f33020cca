#include "cuda/cuda_device.h"

#include <cstdio>

#include "cuda/cublas_loader.h"

namespace petrel::cuda {

Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  return Error("cuda: %s: %s", what, cudaGetErrorString(error));
}

Result<std::vector<DeviceInfo>> EnumerateDevices() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    // The runtime keeps this error for the next call; clear it so later calls are not confused.
    (void)cudaGetLastError();
    return Error("no CUDA device: %s", cudaGetErrorString(error));
  }
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    DeviceInfo info;
    info.index = i;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    info.name = prop.name;
    info.memory_bytes = prop.totalGlobalMem;
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.multiprocessors = prop.multiProcessorCount;
    info.integrated = prop.integrated != 0;
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, i) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i) == cudaSuccess) {
      info.peak_bandwidth = 2.0 * double(clock_khz) * 1e3 * double(bus_bits) / 8.0;
    }
    (void)cudaGetLastError();
    devices.push_back(std::move(info));
  }
  return devices;
}

DeviceDescription Describe(const DeviceInfo& info) {
  DeviceDescription description;
  description.name = info.name;
  description.type = info.integrated ? "integrated" : "discrete";
  description.memory_bytes = info.memory_bytes;
  char features[160];
  std::snprintf(features, sizeof features, "compute capability %d.%d, %d SMs, %.0f GB/s",
                info.cc_major, info.cc_minor, info.multiprocessors, info.peak_bandwidth / 1e9);
  description.features = features;
  return description;
}

size_t BestDevice(const std::vector<DeviceInfo>& devices) {
  size_t best = 0;
  for (size_t i = 1; i < devices.size(); ++i) {
    if (devices[i].memory_bytes > devices[best].memory_bytes) best = i;
  }
  return best;
}

Result<std::unique_ptr<CudaDevice>> CudaDevice::Open(int index) {
  PETREL_ASSIGN_OR_RETURN(const std::vector<DeviceInfo> devices, EnumerateDevices());
  if (devices.empty()) return Error("no CUDA device: the driver reports none");
  if (index >= int(devices.size())) {
    return Error("no CUDA device %d: this machine has %zu", index, devices.size());
  }
  const size_t chosen = index < 0 ? BestDevice(devices) : size_t(index);
  std::unique_ptr<CudaDevice> self(new CudaDevice());
  self->info_ = devices[chosen];
  PETREL_RETURN_IF_ERROR(self->MakeCurrent());
  PETREL_RETURN_IF_ERROR(CudaStatus(
      cudaStreamCreateWithFlags(&self->stream_, cudaStreamNonBlocking), "creating a stream"));
  PETREL_RETURN_IF_ERROR(LoadCublas());
  const cublasStatus_t blas = cublasCreate(&self->cublas_);
  if (blas != CUBLAS_STATUS_SUCCESS) {
    self->cublas_ = nullptr;
    return Error("cuda: cuBLAS: %s", cublasGetStatusString(blas));
  }
  if (cublasSetStream(self->cublas_, self->stream_) != CUBLAS_STATUS_SUCCESS)
    return Error("cuda: cuBLAS: cannot bind the stream");
  return self;
}

CudaDevice::~CudaDevice() {
  (void)MakeCurrent();
  if (stream_) (void)cudaStreamSynchronize(stream_);
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) (void)cudaStreamDestroy(stream_);
}

Status CudaDevice::MakeCurrent() const {
  return CudaStatus(cudaSetDevice(info_.index), "selecting the device");
}

size_t CudaDevice::FreeMemory() const {
  size_t free_bytes = 0, total = 0;
  if (!MakeCurrent().ok() || cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return free_bytes;
}

}  // namespace petrel::cuda
