// Recorder: command buffers, descriptor sets, barriers, uploads, readbacks and timestamps.
#include "vulkan/recorder.h"

#include <algorithm>
#include <cstring>

namespace petrel::vk {
namespace {

constexpr size_t kArenaBuffer = size_t(4) << 20;  // upload/readback space grows in these
constexpr size_t kAlign = 256;
constexpr uint32_t kSetsPerPool = 1024;
constexpr uint32_t kBindingsPerSet = 8;  // descriptors reserved per set, on average
constexpr uint32_t kTimestamps = 8192;   // 4096 timed dispatches between two Wait()s
// A fence that has not signalled after this long means a lost or hung device, not slow work.
constexpr uint64_t kFenceTimeoutNs = uint64_t(600) * 1000 * 1000 * 1000;

size_t AlignUp(size_t value) { return (value + kAlign - 1) / kAlign * kAlign; }

}  // namespace

Result<BufferRange> UploadArena::Reserve(size_t bytes, char** host) {
  const size_t size = std::max<size_t>(bytes, 4);
  while (current_ < buffers_.size() && used_ + size > buffers_[current_]->bytes()) {
    ++current_;
    used_ = 0;
  }
  if (current_ == buffers_.size()) {
    PETREL_ASSIGN_OR_RETURN(auto buffer, pool_.Allocate(std::max(size, kArenaBuffer)));
    if (!buffer->mapped()) return Error("vulkan: staging memory is not host-visible");
    buffers_.push_back(std::move(buffer));
    used_ = 0;
  }
  DeviceBuffer& buffer = *buffers_[current_];
  const BufferRange range = buffer.Range(used_, size);
  *host = buffer.mapped() + used_;
  used_ = AlignUp(used_ + size);
  return range;
}

Result<BufferRange> UploadArena::Take(const void* data, size_t bytes) {
  char* host = nullptr;
  PETREL_ASSIGN_OR_RETURN(BufferRange range, Reserve(bytes, &host));
  if (bytes) std::memcpy(host, data, bytes);
  return range;
}

void UploadArena::Reset() {
  current_ = 0;
  used_ = 0;
}

Recorder::Recorder(VulkanDevice& device, Pipelines& pipelines, MemoryPool& upload_pool,
                   MemoryPool& readback_pool)
    : device_(device), pipelines_(pipelines), per_wait_(upload_pool), readback_(readback_pool) {
  VkCommandPoolCreateInfo info = {};
  info.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  info.queueFamilyIndex = device.queue_family();
  if (vkCreateCommandPool(device.device(), &info, nullptr, &command_pool_) != VK_SUCCESS)
    command_pool_ = VK_NULL_HANDLE;  // Begin() reports it
  if (device.caps().timestamps) {
    VkQueryPoolCreateInfo query_info = {};
    query_info.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
    query_info.queryType = VK_QUERY_TYPE_TIMESTAMP;
    query_info.queryCount = kTimestamps;
    if (vkCreateQueryPool(device.device(), &query_info, nullptr, &queries_) != VK_SUCCESS)
      queries_ = VK_NULL_HANDLE;
  }
}

Recorder::~Recorder() {
  (void)Wait();
  const VkDevice device = device_.device();
  for (VkFence fence : free_fences_) vkDestroyFence(device, fence, nullptr);
  for (VkDescriptorPool pool : descriptor_pools_) vkDestroyDescriptorPool(device, pool, nullptr);
  if (queries_) vkDestroyQueryPool(device, queries_, nullptr);
  if (command_pool_) vkDestroyCommandPool(device, command_pool_, nullptr);
}

Status Recorder::Begin() {
  if (recording_) return Status::Ok();
  if (!command_pool_) return Error("vulkan: no command pool");
  if (free_buffers_.empty()) {
    VkCommandBufferAllocateInfo info = {};
    info.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    info.commandPool = command_pool_;
    info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    info.commandBufferCount = 1;
    VkCommandBuffer buffer = VK_NULL_HANDLE;
    PETREL_VK_RETURN_IF_ERROR(vkAllocateCommandBuffers(device_.device(), &info, &buffer));
    free_buffers_.push_back(buffer);
  }
  VkCommandBuffer buffer = free_buffers_.back();
  VkCommandBufferBeginInfo begin = {};
  begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  PETREL_VK_RETURN_IF_ERROR(vkBeginCommandBuffer(buffer, &begin));
  free_buffers_.pop_back();
  recording_ = buffer;
  if (profiling_ && queries_ && queries_used_ == 0 && timed_ops_.empty()) {
    vkCmdResetQueryPool(recording_, queries_, 0, kTimestamps);
    queries_used_ = 0;
  }
  return Status::Ok();
}

void Recorder::Barrier() {
  // Every earlier shader or transfer write is visible to every later shader or transfer access.
  VkMemoryBarrier barrier = {};
  barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                          VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags stages =
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  vkCmdPipelineBarrier(recording_, stages, stages, 0, 1, &barrier, 0, nullptr, 0, nullptr);
}

Result<VkDescriptorSet> Recorder::AllocateSet(const Pipeline& pipeline) {
  while (true) {
    if (current_pool_ == descriptor_pools_.size()) {
      VkDescriptorPoolSize size = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * kBindingsPerSet};
      VkDescriptorPoolCreateInfo info = {};
      info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
      info.maxSets = kSetsPerPool;
      info.poolSizeCount = 1;
      info.pPoolSizes = &size;
      VkDescriptorPool pool = VK_NULL_HANDLE;
      PETREL_VK_RETURN_IF_ERROR(vkCreateDescriptorPool(device_.device(), &info, nullptr, &pool));
      descriptor_pools_.push_back(pool);
    }
    VkDescriptorSetAllocateInfo info = {};
    info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
    info.descriptorPool = descriptor_pools_[current_pool_];
    info.descriptorSetCount = 1;
    info.pSetLayouts = &pipeline.set_layout;
    VkDescriptorSet set = VK_NULL_HANDLE;
    const VkResult result = vkAllocateDescriptorSets(device_.device(), &info, &set);
    if (result == VK_SUCCESS) return set;
    if (result != VK_ERROR_OUT_OF_POOL_MEMORY && result != VK_ERROR_FRAGMENTED_POOL)
      return CallError("vkAllocateDescriptorSets", result);
    ++current_pool_;  // this pool is full until the next Wait()
  }
}

Status Recorder::Dispatch(OpKind op, std::string_view shader, std::span<const uint32_t> spec,
                          std::span<const BufferRange> bindings, const void* push,
                          size_t push_bytes, std::array<uint32_t, 3> groups) {
  for (int i = 0; i < 3; ++i) {
    if (groups[size_t(i)] > device_.caps().max_workgroup_count[i]) {
      return Error("vulkan: shader %.*s needs %u workgroups in dimension %d; %s allows %u",
                   int(shader.size()), shader.data(), groups[size_t(i)], i,
                   device_.caps().name.c_str(), device_.caps().max_workgroup_count[i]);
    }
  }
  if (groups[0] == 0 || groups[1] == 0 || groups[2] == 0) return Status::Ok();
  PETREL_ASSIGN_OR_RETURN(const Pipeline* pipeline,
                          pipelines_.Get(shader, spec, uint32_t(bindings.size()), uint32_t(push_bytes)));
  PETREL_RETURN_IF_ERROR(Begin());
  PETREL_ASSIGN_OR_RETURN(VkDescriptorSet set, AllocateSet(*pipeline));
  VkDescriptorBufferInfo infos[16];
  VkWriteDescriptorSet writes[16];
  if (bindings.size() > 16) return Error("vulkan: shader %.*s binds more than 16 buffers", int(shader.size()), shader.data());
  for (size_t i = 0; i < bindings.size(); ++i) {
    // A chunk may be larger than one descriptor can reach; each bound range may not.
    if (bindings[i].bytes > device_.caps().max_storage_buffer_range) {
      return Error("vulkan: shader %.*s binds %zu bytes at binding %zu; %s binds at most %zu",
                   int(shader.size()), shader.data(), size_t(bindings[i].bytes), i,
                   device_.caps().name.c_str(), size_t(device_.caps().max_storage_buffer_range));
    }
    infos[i] = {bindings[i].buffer, bindings[i].offset, std::max<VkDeviceSize>(bindings[i].bytes, 4)};
    writes[i] = {};
    writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    writes[i].dstSet = set;
    writes[i].dstBinding = uint32_t(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vkUpdateDescriptorSets(device_.device(), uint32_t(bindings.size()), writes, 0, nullptr);
  Barrier();
  vkCmdBindPipeline(recording_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline->pipeline);
  vkCmdBindDescriptorSets(recording_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline->layout, 0, 1, &set,
                          0, nullptr);
  if (push_bytes) {
    vkCmdPushConstants(recording_, pipeline->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                       uint32_t(push_bytes), push);
  }
  const bool timed = profiling_ && queries_ && queries_used_ + 2 <= kTimestamps;
  if (timed) {
    vkCmdWriteTimestamp(recording_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, queries_used_);
  }
  vkCmdDispatch(recording_, groups[0], groups[1], groups[2]);
  if (timed) {
    vkCmdWriteTimestamp(recording_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_,
                        queries_used_ + 1);
    queries_used_ += 2;
    timed_ops_.push_back(op);
  }
  return Status::Ok();
}

Status Recorder::Copy(const BufferRange& src, const BufferRange& dst) {
  if (src.bytes == 0) return Status::Ok();
  PETREL_RETURN_IF_ERROR(Begin());
  Barrier();
  const VkBufferCopy region = {src.offset, dst.offset, src.bytes};
  vkCmdCopyBuffer(recording_, src.buffer, dst.buffer, 1, &region);
  return Status::Ok();
}

Status Recorder::CopyFromHost(const void* host, const BufferRange& dst) {
  PETREL_ASSIGN_OR_RETURN(BufferRange staged, per_wait_.Take(host, dst.bytes));
  staged.bytes = dst.bytes;
  return Copy(staged, dst);
}

Status Recorder::CopyToHost(const BufferRange& src, void* host) {
  char* staged_host = nullptr;
  PETREL_ASSIGN_OR_RETURN(BufferRange staged, readback_.Reserve(src.bytes, &staged_host));
  staged.bytes = src.bytes;
  PETREL_RETURN_IF_ERROR(Copy(src, staged));
  reads_.push_back({staged_host, host, size_t(src.bytes)});
  return Status::Ok();
}

Status Recorder::Submit() {
  if (!recording_) return Status::Ok();
  // Device writes become visible to host reads once the fence signals.
  VkMemoryBarrier barrier = {};
  barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(recording_,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr, 0, nullptr);
  VkCommandBuffer buffer = recording_;
  recording_ = VK_NULL_HANDLE;
  PETREL_VK_RETURN_IF_ERROR(vkEndCommandBuffer(buffer));
  VkFence fence = VK_NULL_HANDLE;
  if (!free_fences_.empty()) {
    fence = free_fences_.back();
    free_fences_.pop_back();
  } else {
    VkFenceCreateInfo info = {};
    info.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    PETREL_VK_RETURN_IF_ERROR(vkCreateFence(device_.device(), &info, nullptr, &fence));
  }
  VkSubmitInfo submit = {};
  submit.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &buffer;
  const VkResult result = vkQueueSubmit(device_.queue(), 1, &submit, fence);
  if (result != VK_SUCCESS) {
    free_fences_.push_back(fence);
    vkResetCommandBuffer(buffer, 0);
    free_buffers_.push_back(buffer);
    return CallError("vkQueueSubmit", result);
  }
  in_flight_.push_back({buffer, fence});
  return Status::Ok();
}

Status Recorder::Wait() {
  Status status = Submit();
  for (const InFlight& work : in_flight_) {
    const VkResult result =
        vkWaitForFences(device_.device(), 1, &work.fence, VK_TRUE, kFenceTimeoutNs);
    if (result != VK_SUCCESS && status.ok()) {
      status = result == VK_TIMEOUT ? Error("vulkan: the device did not finish a batch in 10 minutes")
                                    : CallError("vkWaitForFences", result);
    }
    vkResetFences(device_.device(), 1, &work.fence);
    vkResetCommandBuffer(work.buffer, 0);
    free_fences_.push_back(work.fence);
    free_buffers_.push_back(work.buffer);
  }
  in_flight_.clear();
  // With the validation layer on, a message about this work fails it (tests run that way).
  if (status.ok() && VulkanDevice::validation_errors() != validation_errors_seen_) {
    validation_errors_seen_ = VulkanDevice::validation_errors();
    status = Error("vulkan validation: %s", VulkanDevice::first_validation_error().c_str());
  }
  if (status.ok()) {
    for (const PendingRead& read : reads_) std::memcpy(read.host, read.staged, read.bytes);
  }
  reads_.clear();
  if (!timed_ops_.empty() && status.ok()) {
    std::vector<uint64_t> stamps(timed_ops_.size() * 2);
    const VkResult result = vkGetQueryPoolResults(
        device_.device(), queries_, 0, uint32_t(stamps.size()), stamps.size() * sizeof(uint64_t),
        stamps.data(), sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (result == VK_SUCCESS) {
      const double ns = device_.caps().timestamp_period_ns;
      for (size_t i = 0; i < timed_ops_.size(); ++i) {
        OpProfile& entry = profile_[size_t(timed_ops_[i])];
        entry.op = timed_ops_[i];
        entry.seconds += double(stamps[2 * i + 1] - stamps[2 * i]) * ns * 1e-9;
      }
    }
  }
  timed_ops_.clear();
  queries_used_ = 0;
  for (VkDescriptorPool pool : descriptor_pools_) vkResetDescriptorPool(device_.device(), pool, 0);
  current_pool_ = 0;
  per_wait_.Reset();
  readback_.Reset();
  return status;
}

std::vector<OpProfile> Recorder::TakeProfile() {
  std::vector<OpProfile> out;
  for (size_t op = 0; op < profile_.size(); ++op) {
    OpProfile& entry = profile_[op];
    entry.calls = nodes_[op];
    if (entry.calls && entry.seconds > 0.0) out.push_back(entry);
    entry = OpProfile{};
    nodes_[op] = 0;
  }
  return out;
}

}  // namespace petrel::vk
