// Compute pipelines, made on first use and kept: one per (shader, specialization constants).
// Every shader petrel runs has the same interface shape: set 0 holds storage buffers at
// bindings 0..n-1, and one push-constant block of at most 128 bytes carries its sizes.
#pragma once

#include <vulkan/vulkan.h>

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "vulkan/vulkan_device.h"

namespace petrel::vk {

struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  uint32_t n_bindings = 0;
  uint32_t push_bytes = 0;
};

class Pipelines {
 public:
  explicit Pipelines(VulkanDevice& device) : device_(device) {}
  ~Pipelines();
  Pipelines(const Pipelines&) = delete;
  Pipelines& operator=(const Pipelines&) = delete;

  // The pipeline of embedded shader `shader` with specialization constants `spec` (constant_id
  // i gets spec[i], all 32-bit), `n_bindings` storage buffers and `push_bytes` of push
  // constants. Fails naming the shader when it is not embedded or the driver rejects it.
  Result<const Pipeline*> Get(std::string_view shader, std::span<const uint32_t> spec,
                              uint32_t n_bindings, uint32_t push_bytes);

 private:
  struct Key {
    std::string shader;
    std::vector<uint32_t> spec;
    uint32_t n_bindings, push_bytes;
    auto operator<=>(const Key&) const = default;
  };
  VulkanDevice& device_;
  std::map<Key, Pipeline> pipelines_;
  std::map<std::string, VkShaderModule, std::less<>> modules_;
};

}  // namespace petrel::vk
