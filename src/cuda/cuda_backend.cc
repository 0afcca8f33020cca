// CudaBackend: the Backend seam over a CudaDevice (stream, cuBLAS handle), a caching allocator
// and the op launch functions of ops.h. Everything runs in order on the device's one stream:
// copies, each batch's array upload and kernels, so Submit has nothing to do and Synchronize is
// a stream synchronization.
#include "cuda/cuda_backend.h"

#include <cstring>
#include <map>

#include "cuda/batch_arrays.h"
#include "cuda/cuda_device.h"
#include "cuda/device_memory.h"
#include "cuda/ops.h"

namespace petrel {
namespace {

using cuda::CudaStatus;
using cuda::DeviceBuffer;

// cudaMalloc / cudaFree on the backend's device.
class DeviceMemory final : public cuda::RawMemory {
 public:
  explicit DeviceMemory(const cuda::CudaDevice& device) : device_(device) {}
  Result<void*> Allocate(size_t bytes) override {
    PETREL_RETURN_IF_ERROR(device_.MakeCurrent());
    void* ptr = nullptr;
    const cudaError_t error = cudaMalloc(&ptr, bytes);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();
      return Error("cuda: out of device memory: %zu bytes on %s (%s)", bytes,
                   device_.info().name.c_str(), cudaGetErrorString(error));
    }
    return ptr;
  }
  void Free(void* ptr) override {
    (void)device_.MakeCurrent();
    (void)cudaFree(ptr);
  }

 private:
  const cuda::CudaDevice& device_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(BackendId id, std::unique_ptr<cuda::CudaDevice> device)
      : id_(id), device_(std::move(device)), allocator_(std::make_unique<DeviceMemory>(*device_)) {}

  ~CudaBackend() override {
    (void)device_->MakeCurrent();
    (void)cudaStreamSynchronize(device_->stream());
    for (const Timed& timed : timed_) {
      (void)cudaEventDestroy(timed.start);
      (void)cudaEventDestroy(timed.end);
    }
    for (cudaEvent_t event : spare_events_) (void)cudaEventDestroy(event);
    if (upload_done_) (void)cudaEventDestroy(upload_done_);
    if (pinned_) (void)cudaFreeHost(pinned_);
  }

  const char* Name() const override { return "cuda"; }
  BackendId id() const override { return id_; }

  bool Supports(const Node& node) const override { return cuda::SupportsNode(node); }
  bool SupportsKv(DType type) const override { return cuda::SupportsKvType(type); }

  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) override {
    PETREL_RETURN_IF_ERROR(device_->MakeCurrent());
    PETREL_ASSIGN_OR_RETURN(auto buffer, DeviceBuffer::Make(allocator_, bytes));
    return std::unique_ptr<BackendBuffer>(std::move(buffer));
  }
  Result<TensorView> PrepareWeight(const TensorView& host_view) override;

  Status CopyToHost(const BackendBuffer& src, size_t src_offset, void* host_dst,
                    size_t bytes) override {
    PETREL_RETURN_IF_ERROR(CheckRange(src, src_offset, bytes));
    PETREL_RETURN_IF_ERROR(device_->MakeCurrent());
    return CudaStatus(cudaMemcpyAsync(host_dst, cuda::AsDevice(src).data() + src_offset, bytes,
                                      cudaMemcpyDeviceToHost, device_->stream()),
                      "copy to the host");
  }
  Status CopyFromHost(const void* host_src, BackendBuffer& dst, size_t dst_offset,
                      size_t bytes) override {
    PETREL_RETURN_IF_ERROR(CheckRange(dst, dst_offset, bytes));
    PETREL_RETURN_IF_ERROR(device_->MakeCurrent());
    return CudaStatus(cudaMemcpyAsync(cuda::AsDevice(dst).data() + dst_offset, host_src, bytes,
                                      cudaMemcpyHostToDevice, device_->stream()),
                      "copy from the host");
  }
  Status CopyWithin(const BackendBuffer& src, size_t src_offset, BackendBuffer& dst,
                    size_t dst_offset, size_t bytes) override {
    PETREL_RETURN_IF_ERROR(CheckRange(src, src_offset, bytes));
    PETREL_RETURN_IF_ERROR(CheckRange(dst, dst_offset, bytes));
    PETREL_RETURN_IF_ERROR(device_->MakeCurrent());
    return CudaStatus(cudaMemcpyAsync(cuda::AsDevice(dst).data() + dst_offset,
                                      cuda::AsDevice(src).data() + src_offset, bytes,
                                      cudaMemcpyDeviceToDevice, device_->stream()),
                      "copy within the device");
  }
  Status Synchronize() override {
    PETREL_RETURN_IF_ERROR(device_->MakeCurrent());
    return CudaStatus(cudaStreamSynchronize(device_->stream()), "running the batch");
  }

  Status BeginBatch(const BatchContext& batch) override;
  Status Run(const Node& node, const ValueView* values, const KvLayerView* kv) override;
  // Every launch is already queued on the stream, which the device runs as it comes.
  Status Submit() override { return Status::Ok(); }

  size_t FreeMemory() const override { return device_->FreeMemory(); }
  void EnableProfiling(bool enabled) override { profiling_ = enabled; }
  std::vector<OpProfile> TakeProfile() override;

 private:
  Status CheckRange(const BackendBuffer& buffer, size_t offset, size_t bytes) const {
    if (offset + bytes > buffer.bytes() || offset + bytes < offset)
      return Error("cuda: copy past the end of a buffer");
    return Status::Ok();
  }
  static Result<const double*> RopeTableOf(void* self, const double* inv_freq, size_t pairs);
  Status CollectTimings();  // folds finished timed nodes into profile_
  Result<cudaEvent_t> NewEvent();

  BackendId id_;
  std::unique_ptr<cuda::CudaDevice> device_;
  cuda::CachingAllocator allocator_;  // after device_: freed before the device is closed
  std::vector<std::unique_ptr<DeviceBuffer>> weights_;
  // RoPE frequency tables by the model's host pointer, uploaded once each.
  std::map<std::pair<const double*, size_t>, std::unique_ptr<DeviceBuffer>> rope_tables_;
  // The current batch: host arrays, their packed copy (pinned, so the upload is asynchronous)
  // and the device buffer it goes to.
  BatchContext batch_;
  std::vector<int32_t> packed_;
  int32_t* pinned_ = nullptr;
  size_t pinned_elems_ = 0;
  cudaEvent_t upload_done_ = nullptr;  // the pinned array may be rewritten after this
  std::unique_ptr<DeviceBuffer> batch_buffer_;
  cuda::DeviceBatch device_batch_;
  // Profiling: a pair of events around every node since the last collection.
  struct Timed {
    OpKind op;
    cudaEvent_t start, end;
  };
  bool profiling_ = false;
  std::vector<Timed> timed_;
  std::vector<cudaEvent_t> spare_events_;
  std::map<OpKind, OpProfile> profile_;
};

Result<TensorView> CudaBackend::PrepareWeight(const TensorView& host_view) {
  PETREL_RETURN_IF_ERROR(device_->MakeCurrent());
  const size_t bytes = host_view.desc.bytes();
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<DeviceBuffer> buffer,
                          DeviceBuffer::MakeLasting(allocator_, bytes));
  // From the mapped file as stored; synchronous, so the pages may be dropped right after.
  PETREL_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(buffer->data(), host_view.data, bytes,
                                                    cudaMemcpyHostToDevice, device_->stream()),
                                    "uploading a weight"));
  PETREL_RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(device_->stream()), "uploading a weight"));
  TensorView view = host_view;
  view.data = buffer.get();
  view.backend = id_;
  weights_.push_back(std::move(buffer));
  return view;
}

Status CudaBackend::BeginBatch(const BatchContext& batch) {
  PETREL_RETURN_IF_ERROR(device_->MakeCurrent());
  if (profiling_) PETREL_RETURN_IF_ERROR(CollectTimings());
  batch_ = batch;
  const cuda::BatchLayout layout = cuda::PackBatch(batch, &packed_);
  if (upload_done_ == nullptr) {
    PETREL_RETURN_IF_ERROR(CudaStatus(
        cudaEventCreateWithFlags(&upload_done_, cudaEventDisableTiming), "creating an event"));
  } else {
    // The previous batch's upload may still be reading the pinned array.
    PETREL_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(upload_done_), "uploading a batch"));
  }
  if (pinned_elems_ < layout.total) {
    if (pinned_) (void)cudaFreeHost(pinned_);
    pinned_ = nullptr;
    pinned_elems_ = 0;
    void* host = nullptr;
    PETREL_RETURN_IF_ERROR(CudaStatus(cudaMallocHost(&host, layout.total * sizeof(int32_t)),
                                      "allocating pinned memory"));
    pinned_ = static_cast<int32_t*>(host);
    pinned_elems_ = layout.total;
  }
  if (!batch_buffer_ || batch_buffer_->bytes() < layout.total * sizeof(int32_t)) {
    // The old buffer goes back to the allocator; work of earlier batches that reads it is
    // ordered before any reuse (one stream).
    batch_buffer_.reset();
    PETREL_ASSIGN_OR_RETURN(batch_buffer_,
                            DeviceBuffer::Make(allocator_, layout.total * sizeof(int32_t)));
  }
  std::memcpy(pinned_, packed_.data(), layout.total * sizeof(int32_t));
  PETREL_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(batch_buffer_->data(), pinned_, layout.total * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, device_->stream()),
                 "uploading a batch"));
  PETREL_RETURN_IF_ERROR(
      CudaStatus(cudaEventRecord(upload_done_, device_->stream()), "uploading a batch"));
  device_batch_ =
      cuda::PointersInto(reinterpret_cast<const int32_t*>(batch_buffer_->data()), layout);
  return Status::Ok();
}

Result<const double*> CudaBackend::RopeTableOf(void* opaque, const double* inv_freq, size_t pairs) {
  auto* self = static_cast<CudaBackend*>(opaque);
  auto& table = self->rope_tables_[{inv_freq, pairs}];
  if (!table) {
    PETREL_ASSIGN_OR_RETURN(table,
                            DeviceBuffer::MakeLasting(self->allocator_, pairs * sizeof(double)));
    // Synchronous (pageable memory): once per table, at the first batch.
    PETREL_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(table->data(), inv_freq, pairs * sizeof(double),
                                   cudaMemcpyHostToDevice, self->device_->stream()),
                   "uploading a RoPE table"));
  }
  return reinterpret_cast<const double*>(table->data());
}

Result<cudaEvent_t> CudaBackend::NewEvent() {
  if (!spare_events_.empty()) {
    cudaEvent_t event = spare_events_.back();
    spare_events_.pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  PETREL_RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&event), "creating a profiling event"));
  return event;
}

Status CudaBackend::CollectTimings() {
  if (timed_.empty()) return Status::Ok();
  PETREL_RETURN_IF_ERROR(
      CudaStatus(cudaEventSynchronize(timed_.back().end), "reading profiling events"));
  for (const Timed& timed : timed_) {
    float ms = 0.0f;
    PETREL_RETURN_IF_ERROR(
        CudaStatus(cudaEventElapsedTime(&ms, timed.start, timed.end), "reading profiling events"));
    OpProfile& op = profile_[timed.op];
    op.op = timed.op;
    ++op.calls;
    op.seconds += double(ms) * 1e-3;
    spare_events_.push_back(timed.start);
    spare_events_.push_back(timed.end);
  }
  timed_.clear();
  return Status::Ok();
}

std::vector<OpProfile> CudaBackend::TakeProfile() {
  (void)device_->MakeCurrent();
  std::vector<OpProfile> out;
  if (!CollectTimings().ok()) return out;
  for (const auto& [kind, op] : profile_) out.push_back(op);
  profile_.clear();
  return out;
}

Status CudaBackend::Run(const Node& node, const ValueView* values, const KvLayerView* kv) {
  const cuda::OpContext ctx{device_->stream(), device_->cublas(), allocator_, batch_,
                            device_batch_,     &RopeTableOf,      this};
  cudaEvent_t start = nullptr;
  if (profiling_) {
    PETREL_ASSIGN_OR_RETURN(start, NewEvent());
    PETREL_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(start, device_->stream()), "profiling"));
  }
  Status status = Status::Ok();
  switch (node.op) {
    case OpKind::kEmbed:
      status = cuda::RunEmbed(ctx, node, values);
      break;
    case OpKind::kRmsNorm:
      status = cuda::RunRmsNorm(ctx, node, values);
      break;
    case OpKind::kMatMul:
      status = cuda::RunMatMul(ctx, node, values);
      break;
    case OpKind::kGatedFfn:
      status = cuda::RunGatedFfn(ctx, node, values);
      break;
    case OpKind::kRope:
      status = cuda::RunRope(ctx, node, values);
      break;
    case OpKind::kAttention:
      status = kv == nullptr ? Error("cuda: attention of layer %d has no KV cache", node.layer)
                             : cuda::RunAttention(ctx, node, values, *kv);
      break;
    case OpKind::kHeadRmsNorm:
      status = cuda::RunHeadRmsNorm(ctx, node, values);
      break;
    case OpKind::kSiluMul:
    case OpKind::kGeluMul:
    case OpKind::kAdd:
      status = cuda::RunElementwise(ctx, node, values);
      break;
    case OpKind::kScale:
    case OpKind::kSoftcap:
      status = cuda::RunScale(ctx, node, values);
      break;
    case OpKind::kGetRows:
      status = cuda::RunGetRows(ctx, node, values);
      break;
    case OpKind::kMoeFfn:
      status = cuda::RunMoeFfn(ctx, node, values);
      break;
    case OpKind::kLayerNorm:
    case OpKind::kGelu:
    case OpKind::kAddRows:
    case OpKind::kScaleRows:
    case OpKind::kMlaAttention:
      status = Error("cuda: op %s is not implemented", OpName(node.op));
      break;
    case OpKind::kCount:
      status = Error("cuda: unknown op %d", int(node.op));
      break;
  }
  if (start != nullptr) {
    auto end = NewEvent();
    if (!end.ok() || cudaEventRecord(*end, device_->stream()) != cudaSuccess) {
      spare_events_.push_back(start);
      if (end.ok()) spare_events_.push_back(*end);
    } else {
      timed_.push_back({node.op, start, *end});
    }
  }
  return status;
}

}  // namespace

Result<std::unique_ptr<Backend>> CreateCudaBackend(BackendId id, const BackendOptions& options) {
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaDevice> device,
                          cuda::CudaDevice::Open(options.device_index));
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(id, std::move(device)));
}

Result<std::vector<DeviceDescription>> ListCudaDevices() {
  PETREL_ASSIGN_OR_RETURN(std::vector<cuda::DeviceInfo> devices, cuda::EnumerateDevices());
  std::vector<DeviceDescription> out;
  for (const cuda::DeviceInfo& info : devices) out.push_back(cuda::Describe(info));
  return out;
}

}  // namespace petrel
