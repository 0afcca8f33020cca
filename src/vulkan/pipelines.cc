// Pipelines: shader modules from the embedded SPIR-V, one layout per (bindings, push size).
#include "vulkan/pipelines.h"

#include "vulkan/shaders.h"

namespace petrel::vk {

Pipelines::~Pipelines() {
  const VkDevice device = device_.device();
  for (auto& [key, p] : pipelines_) {
    vkDestroyPipeline(device, p.pipeline, nullptr);
    vkDestroyPipelineLayout(device, p.layout, nullptr);
    vkDestroyDescriptorSetLayout(device, p.set_layout, nullptr);
  }
  for (auto& [name, module] : modules_) vkDestroyShaderModule(device, module, nullptr);
}

Result<const Pipeline*> Pipelines::Get(std::string_view shader, std::span<const uint32_t> spec,
                                       uint32_t n_bindings, uint32_t push_bytes) {
  Key key{std::string(shader), std::vector<uint32_t>(spec.begin(), spec.end()), n_bindings,
          push_bytes};
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return &it->second;
  const VkDevice device = device_.device();
  if (push_bytes > device_.caps().max_push_constants) {
    return Error("vulkan: shader %s needs %u bytes of push constants; %s has %u", key.shader.c_str(),
                 push_bytes, device_.caps().name.c_str(), device_.caps().max_push_constants);
  }
  auto module_it = modules_.find(shader);
  if (module_it == modules_.end()) {
    const std::span<const uint32_t> code = ShaderCode(shader);
    if (code.empty()) return Error("vulkan: no shader named %s in this build", key.shader.c_str());
    VkShaderModuleCreateInfo info = {};
    info.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    info.codeSize = code.size() * sizeof(uint32_t);
    info.pCode = code.data();
    VkShaderModule module = VK_NULL_HANDLE;
    PETREL_VK_RETURN_IF_ERROR(vkCreateShaderModule(device, &info, nullptr, &module));
    module_it = modules_.emplace(std::string(shader), module).first;
  }
  Pipeline p;
  p.n_bindings = n_bindings;
  p.push_bytes = push_bytes;
  std::vector<VkDescriptorSetLayoutBinding> bindings(n_bindings);
  for (uint32_t i = 0; i < n_bindings; ++i) {
    bindings[i] = {};
    bindings[i].binding = i;
    bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bindings[i].descriptorCount = 1;
    bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo set_info = {};
  set_info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
  set_info.bindingCount = n_bindings;
  set_info.pBindings = bindings.data();
  PETREL_VK_RETURN_IF_ERROR(vkCreateDescriptorSetLayout(device, &set_info, nullptr, &p.set_layout));
  VkPushConstantRange range = {};
  range.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  range.size = (push_bytes + 3) / 4 * 4;
  VkPipelineLayoutCreateInfo layout_info = {};
  layout_info.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  layout_info.setLayoutCount = 1;
  layout_info.pSetLayouts = &p.set_layout;
  layout_info.pushConstantRangeCount = push_bytes ? 1 : 0;
  layout_info.pPushConstantRanges = &range;
  VkResult result = vkCreatePipelineLayout(device, &layout_info, nullptr, &p.layout);
  if (result != VK_SUCCESS) {
    vkDestroyDescriptorSetLayout(device, p.set_layout, nullptr);
    return CallError("vkCreatePipelineLayout", result);
  }
  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    entries[i].constantID = uint32_t(i);
    entries[i].offset = uint32_t(i * sizeof(uint32_t));
    entries[i].size = sizeof(uint32_t);
  }
  VkSpecializationInfo spec_info = {};
  spec_info.mapEntryCount = uint32_t(entries.size());
  spec_info.pMapEntries = entries.data();
  spec_info.dataSize = spec.size() * sizeof(uint32_t);
  spec_info.pData = spec.data();
  VkComputePipelineCreateInfo info = {};
  info.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module_it->second;
  info.stage.pName = "main";
  info.stage.pSpecializationInfo = spec.empty() ? nullptr : &spec_info;
  info.layout = p.layout;
  result = vkCreateComputePipelines(device, VK_NULL_HANDLE, 1, &info, nullptr, &p.pipeline);
  if (result != VK_SUCCESS) {
    vkDestroyPipelineLayout(device, p.layout, nullptr);
    vkDestroyDescriptorSetLayout(device, p.set_layout, nullptr);
    return Error("vulkan: shader %s: vkCreateComputePipelines failed: %s", key.shader.c_str(),
                 ResultName(result));
  }
  return &pipelines_.emplace(std::move(key), p).first->second;
}

}  // namespace petrel::vk
