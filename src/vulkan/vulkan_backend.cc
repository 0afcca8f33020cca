// VulkanBackend: the Backend seam over a VulkanDevice (memory pools, pipelines, recorder) and
// the op recording functions of ops.h.
#include "vulkan/vulkan_backend.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <set>

#include "core/base/log.h"
#include "quant/quantize.h"
#include "vulkan/device_memory.h"
#include "vulkan/ops.h"
#include "vulkan/pipelines.h"
#include "vulkan/recorder.h"
#include "vulkan/vulkan_device.h"

namespace petrel {
namespace {

using vk::BufferRange;
using vk::DeviceBuffer;

constexpr size_t kDeviceChunk = size_t(256) << 20;
constexpr size_t kStagingChunk = size_t(16) << 20;
// Weights are uploaded in pieces of this size when their memory is not host-visible, so the
// staging memory stays small whatever the tensor.
constexpr size_t kUploadPiece = size_t(64) << 20;

class VulkanBackend final : public Backend {
 public:
  VulkanBackend(BackendId id, std::unique_ptr<vk::VulkanDevice> device)
      : id_(id),
        device_(std::move(device)),
        device_pool_(*device_, vk::MemoryKind::kDevice, kDeviceChunk),
        upload_pool_(*device_, vk::MemoryKind::kUpload, kStagingChunk),
        readback_pool_(*device_, vk::MemoryKind::kReadback, kStagingChunk),
        pipelines_(*device_),
        recorder_(*device_, pipelines_, upload_pool_, readback_pool_),
        batch_uploads_(upload_pool_) {}

  ~VulkanBackend() override { (void)recorder_.Wait(); }

  const char* Name() const override { return "vulkan"; }
  BackendId id() const override { return id_; }

  bool Supports(const Node& node) const override;
  bool SupportsKv(DType type) const override { return vk::SupportsKvType(type); }

  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) override {
    PETREL_ASSIGN_OR_RETURN(auto buffer, device_pool_.Allocate(bytes));
    return std::unique_ptr<BackendBuffer>(std::move(buffer));
  }
  Result<TensorView> PrepareWeight(const TensorView& host_view) override;

  Status CopyToHost(const BackendBuffer& src, size_t src_offset, void* host_dst,
                    size_t bytes) override {
    PETREL_RETURN_IF_ERROR(CheckRange(src, src_offset, bytes));
    return recorder_.CopyToHost(vk::AsDevice(src).Range(src_offset, bytes), host_dst);
  }
  Status CopyFromHost(const void* host_src, BackendBuffer& dst, size_t dst_offset,
                      size_t bytes) override {
    PETREL_RETURN_IF_ERROR(CheckRange(dst, dst_offset, bytes));
    return recorder_.CopyFromHost(host_src, vk::AsDevice(dst).Range(dst_offset, bytes));
  }
  Status CopyWithin(const BackendBuffer& src, size_t src_offset, BackendBuffer& dst,
                    size_t dst_offset, size_t bytes) override {
    PETREL_RETURN_IF_ERROR(CheckRange(src, src_offset, bytes));
    PETREL_RETURN_IF_ERROR(CheckRange(dst, dst_offset, bytes));
    return recorder_.Copy(vk::AsDevice(src).Range(src_offset, bytes),
                          vk::AsDevice(dst).Range(dst_offset, bytes));
  }
  Status Synchronize() override { return recorder_.Wait(); }

  Status BeginBatch(const BatchContext& batch) override;
  Status Run(const Node& node, const ValueView* values, const KvLayerView* kv) override;
  Status Submit() override { return recorder_.Submit(); }

  size_t FreeMemory() const override { return device_->FreeMemory(); }
  size_t WeightBytes() const override {
    size_t bytes = 0;
    for (const auto& weight : weights_) bytes += weight->bytes();
    return bytes;
  }
  void EnableProfiling(bool enabled) override { recorder_.EnableProfiling(enabled); }
  std::vector<OpProfile> TakeProfile() override { return recorder_.TakeProfile(); }

 private:
  Status CheckRange(const BackendBuffer& buffer, size_t offset, size_t bytes) const {
    if (offset + bytes > buffer.bytes() || offset + bytes < offset)
      return Error("vulkan: copy past the end of a buffer");
    return Status::Ok();
  }
  Result<BufferRange> UploadInts(const int32_t* data, size_t n) {
    return batch_uploads_.Take(data, n * sizeof(int32_t));
  }
  static Result<BufferRange> RopeTableOf(void* self, const double* inv_freq, size_t pairs);
  static Result<BufferRange> ScratchOf(void* self, size_t slot, size_t bytes);
  Status Upload(const void* host, DeviceBuffer& dst, size_t bytes);

  BackendId id_;
  std::unique_ptr<vk::VulkanDevice> device_;
  vk::MemoryPool device_pool_, upload_pool_, readback_pool_;
  vk::Pipelines pipelines_;
  vk::Recorder recorder_;
  std::vector<std::unique_ptr<DeviceBuffer>> weights_;
  // The IQ codebooks every weight op binds (vk::WeightGridWords()), uploaded with the first weight.
  std::unique_ptr<DeviceBuffer> weight_grids_;
  std::set<DType> converted_;  // weight types already reported as converted
  // The current batch: its host arrays, their device copies, and RoPE tables made for it.
  BatchContext batch_;
  vk::DeviceBatch device_batch_;
  vk::UploadArena batch_uploads_;
  struct RopeTable {
    const double* inv_freq;
    size_t pairs;
    BufferRange range;
  };
  std::vector<RopeTable> rope_tables_;
  std::vector<float> rope_scratch_;
  // Ops' device scratch (OpContext::Scratch), grown on demand; a buffer replaced during a batch
  // may still be read by recorded work, so it is kept until the next batch.
  std::array<std::unique_ptr<DeviceBuffer>, vk::kScratchSlots> scratch_;
  std::vector<std::unique_ptr<DeviceBuffer>> retired_scratch_;
};

bool VulkanBackend::Supports(const Node& node) const {
  const vk::DeviceCaps& caps = device_->caps();
  // A weight of a type without shaders is converted at upload; one the host cannot decode, or
  // one larger than the device binds in one descriptor, stays on the CPU.
  auto weight_ok = [&](const TensorView* w) {
    if (w == nullptr) return false;
    const DType type = w->desc.dtype;
    if (!vk::HasWeightShaders(type) && !(CanDequantize(type) && vk::HasWeightShaders(vk::UploadType(type))))
      return false;
    const auto bytes = RowBytes(vk::UploadType(type), uint64_t(w->desc.ne[0]));
    return bytes && *bytes * uint64_t(w->desc.n_rows()) <= caps.max_storage_buffer_range;
  };
  switch (node.op) {
    case OpKind::kMatMul:
    case OpKind::kEmbed:
      return weight_ok(node.weight);
    case OpKind::kGatedFfn:
      return weight_ok(node.weight) && weight_ok(node.weight_up) &&
             node.weight->desc.dtype == node.weight_up->desc.dtype;
    case OpKind::kAttention:
      // No shader takes attention sinks: such layers stay on the CPU.
      return node.attention.causal && node.attention.n_kv_heads > 0 &&
             node.attention.n_heads % node.attention.n_kv_heads == 0 &&
             node.attention.sinks == nullptr && vk::SupportsAttention(node.attention, caps);
    case OpKind::kRope:
      // YaRN's attention factor is not in the shader: such layers stay on the CPU.
      return node.rope.inv_freq != nullptr && node.rope.rot_dims % 2 == 0 &&
             node.rope.rot_dims <= node.rope.head_dim && node.rope.attn_factor == 1.0f;
    case OpKind::kRmsNorm:
      return node.weight != nullptr && node.weight->desc.dtype == DType::kF32;
    case OpKind::kHeadRmsNorm:
      return node.weight != nullptr && node.weight->desc.dtype == DType::kF32 &&
             node.norm.head_dim > 0 && node.weight->desc.n_elems() == node.norm.head_dim;
    case OpKind::kSoftcap:
      return node.scalar > 0.0f;
    case OpKind::kSiluMul:
    case OpKind::kGeluMul:
    case OpKind::kAdd:
    case OpKind::kScale:
    case OpKind::kGetRows:
      return true;
    case OpKind::kMoeFfn:  // routing and experts on the device (ops_moe.cc)
      return vk::SupportsMoe(node) && weight_ok(node.weight) && weight_ok(node.weight_up) &&
             weight_ok(node.weight_down);
    case OpKind::kScaleRows:  // per-sequence LoRA scales: the adapted layers run on the CPU
    case OpKind::kLayerNorm:  // the encoder's ops (and bidirectional attention) run on the host
    case OpKind::kGelu:
    case OpKind::kAddRows:
    case OpKind::kMlaAttention:  // latent attention runs on the host backends (the layer moves)
      return false;
    case OpKind::kCount:
      break;
  }
  return false;
}

Status VulkanBackend::Upload(const void* host, DeviceBuffer& dst, size_t bytes) {
  if (dst.mapped() && recorder_.idle()) {
    // Unified memory (integrated GPUs, lavapipe): the bytes go straight in.
    std::memcpy(dst.mapped(), host, bytes);
    return Status::Ok();
  }
  const char* src = static_cast<const char*>(host);
  for (size_t done = 0; done < bytes; done += kUploadPiece) {
    const size_t n = std::min(kUploadPiece, bytes - done);
    PETREL_RETURN_IF_ERROR(recorder_.CopyFromHost(src + done, dst.Range(done, n)));
    PETREL_RETURN_IF_ERROR(recorder_.Wait());  // frees the staging space for the next piece
  }
  return Status::Ok();
}

Result<TensorView> VulkanBackend::PrepareWeight(const TensorView& host_view) {
  if (!weight_grids_) {
    const std::span<const uint32_t> words = vk::WeightGridWords();
    PETREL_ASSIGN_OR_RETURN(weight_grids_, device_pool_.Allocate(words.size_bytes()));
    PETREL_RETURN_IF_ERROR(Upload(words.data(), *weight_grids_, words.size_bytes()));
  }
  TensorView view = host_view;
  const DType type = host_view.desc.dtype;
  const DType upload_type = vk::UploadType(type);
  std::vector<uint8_t> converted;
  const void* bytes = host_view.data;
  if (upload_type != type) {
    // No shaders for this type: decode each row and re-encode it as the nearest native type.
    view.desc.dtype = upload_type;
    const size_t n_in = size_t(host_view.desc.ne[0]);
    const size_t rows = size_t(host_view.desc.n_rows());
    converted.resize(view.desc.bytes());
    std::vector<float> row(n_in);
    for (size_t r = 0; r < rows; ++r) {
      if (!DequantizeRow(type, host_view.row(int64_t(r)), row.data(), n_in) ||
          !QuantizeRow(upload_type, row.data(), converted.data() + r * view.desc.row_bytes(), n_in)) {
        return Error("vulkan: cannot convert %s weights to %s", DTypeName(type),
                     DTypeName(upload_type));
      }
    }
    if (converted_.insert(type).second) {
      PETREL_LOG_INFO("vulkan: %s weights are converted to %s at upload (no %s shaders)",
                      DTypeName(type), DTypeName(upload_type), DTypeName(type));
    }
    bytes = converted.data();
  }
  std::unique_ptr<DeviceBuffer> buffer;
  if (converted.empty() && device_->caps().host_import_alignment) {
    // Unified memory: the device reads the weight where it lies in the mapped file, so the
    // model is in memory once, as on the CPU. A driver that refuses the pages gets a copy.
    auto imported = device_pool_.Import(bytes, view.desc.bytes());
    if (imported.ok()) buffer = std::move(imported).value();
  }
  if (!buffer) {
    PETREL_ASSIGN_OR_RETURN(buffer, device_pool_.Allocate(view.desc.bytes()));
    PETREL_RETURN_IF_ERROR(Upload(bytes, *buffer, view.desc.bytes()));
  }
  view.data = buffer.get();
  view.backend = id_;
  weights_.push_back(std::move(buffer));
  return view;
}

Status VulkanBackend::BeginBatch(const BatchContext& batch) {
  // The previous batch's arrays may still be read by work in flight.
  if (!recorder_.idle()) PETREL_RETURN_IF_ERROR(recorder_.Wait());
  batch_ = batch;
  batch_uploads_.Reset();
  retired_scratch_.clear();
  rope_tables_.clear();
  vk::DeviceBatch& d = device_batch_;
  const size_t n = batch.n_tokens;
  PETREL_ASSIGN_OR_RETURN(d.tokens, UploadInts(batch.tokens, n));
  PETREL_ASSIGN_OR_RETURN(d.positions, UploadInts(batch.positions, n));
  PETREL_ASSIGN_OR_RETURN(d.token_seq, UploadInts(batch.token_seq, n));
  const size_t table_entries = batch.block_table_begin ? size_t(batch.block_table_begin[batch.n_seqs]) : 0;
  PETREL_ASSIGN_OR_RETURN(d.block_tables, UploadInts(batch.block_tables, table_entries));
  PETREL_ASSIGN_OR_RETURN(d.block_table_begin,
                          UploadInts(batch.block_table_begin, batch.block_table_begin ? batch.n_seqs + 1 : 0));
  PETREL_ASSIGN_OR_RETURN(d.n_ctx, UploadInts(batch.n_ctx, n));
  PETREL_ASSIGN_OR_RETURN(d.kv_slot, UploadInts(batch.kv_slot, n));
  PETREL_ASSIGN_OR_RETURN(d.selected_rows, UploadInts(batch.selected_rows, batch.n_selected));
  return Status::Ok();
}

Result<BufferRange> VulkanBackend::RopeTableOf(void* opaque, const double* inv_freq, size_t pairs) {
  auto* self = static_cast<VulkanBackend*>(opaque);
  for (const RopeTable& table : self->rope_tables_) {
    if (table.inv_freq == inv_freq && table.pairs == pairs) return table.range;
  }
  const size_t n = self->batch_.n_tokens;
  std::vector<float>& values = self->rope_scratch_;
  values.resize(2 * n * pairs);
  for (size_t t = 0; t < n; ++t) {
    for (size_t i = 0; i < pairs; ++i) {
      // Angles in double, as the CPU backend computes them.
      const double angle = double(self->batch_.positions[t]) * inv_freq[i];
      values[t * pairs + i] = float(std::cos(angle));
      values[n * pairs + t * pairs + i] = float(std::sin(angle));
    }
  }
  PETREL_ASSIGN_OR_RETURN(BufferRange range,
                          self->batch_uploads_.Take(values.data(), values.size() * sizeof(float)));
  self->rope_tables_.push_back({inv_freq, pairs, range});
  return range;
}

Result<BufferRange> VulkanBackend::ScratchOf(void* opaque, size_t slot, size_t bytes) {
  auto* self = static_cast<VulkanBackend*>(opaque);
  PETREL_CHECK(slot < self->scratch_.size());
  std::unique_ptr<DeviceBuffer>& buffer = self->scratch_[slot];
  if (!buffer || buffer->bytes() < bytes) {
    if (buffer) self->retired_scratch_.push_back(std::move(buffer));
    // Some headroom, so that a batch a little larger than the last does not allocate again.
    PETREL_ASSIGN_OR_RETURN(buffer,
                            self->device_pool_.Allocate(std::max<size_t>(bytes + bytes / 4, 256)));
  }
  return buffer->Whole();
}

Status VulkanBackend::Run(const Node& node, const ValueView* values, const KvLayerView* kv) {
  const vk::OpContext ctx{recorder_,
                          device_->caps(),
                          batch_,
                          device_batch_,
                          &RopeTableOf,
                          this,
                          weight_grids_ ? weight_grids_->Whole() : BufferRange{},
                          &ScratchOf};
  recorder_.CountNode(node.op);
  switch (node.op) {
    case OpKind::kEmbed: return vk::RecordEmbed(ctx, node, values);
    case OpKind::kRmsNorm: return vk::RecordRmsNorm(ctx, node, values);
    case OpKind::kMatMul: return vk::RecordMatMul(ctx, node, values);
    case OpKind::kGatedFfn: return vk::RecordGatedFfn(ctx, node, values);
    case OpKind::kRope: return vk::RecordRope(ctx, node, values);
    case OpKind::kAttention:
      if (kv == nullptr) return Error("vulkan: attention of layer %d has no KV cache", node.layer);
      return vk::RecordAttention(ctx, node, values, *kv);
    case OpKind::kHeadRmsNorm: return vk::RecordHeadRmsNorm(ctx, node, values);
    case OpKind::kSiluMul:
    case OpKind::kGeluMul:
    case OpKind::kAdd: return vk::RecordElementwise(ctx, node, values);
    case OpKind::kScale:
    case OpKind::kSoftcap: return vk::RecordScale(ctx, node, values);
    case OpKind::kGetRows: return vk::RecordGetRows(ctx, node, values);
    case OpKind::kMoeFfn: return vk::RecordMoeFfn(ctx, node, values);
    case OpKind::kLayerNorm:
    case OpKind::kGelu:
    case OpKind::kAddRows:
    case OpKind::kScaleRows:
    case OpKind::kMlaAttention: return Error("vulkan: op %s is not implemented", OpName(node.op));
    case OpKind::kCount: break;
  }
  return Error("vulkan: unknown op %d", int(node.op));
}

}  // namespace

Result<std::unique_ptr<Backend>> CreateVulkanBackend(BackendId id, const BackendOptions& options) {
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<vk::VulkanDevice> device,
                          vk::VulkanDevice::Open(options.device_index));
  return std::unique_ptr<Backend>(std::make_unique<VulkanBackend>(id, std::move(device)));
}

Result<std::vector<DeviceDescription>> ListVulkanDevices() {
  PETREL_ASSIGN_OR_RETURN(std::vector<vk::DeviceCaps> devices, vk::EnumerateDevices());
  std::vector<DeviceDescription> out;
  for (const vk::DeviceCaps& caps : devices) out.push_back(vk::Describe(caps));
  return out;
}

}  // namespace petrel
