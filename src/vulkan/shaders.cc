// Lookup of embedded shaders by name.
#include "vulkan/shaders.h"

namespace petrel::vk {

std::span<const uint32_t> ShaderCode(std::string_view name) {
  for (const EmbeddedShader& shader : EmbeddedShaders()) {
    if (name == shader.name) return {shader.words, shader.n_words};
  }
  return {};
}

}  // namespace petrel::vk
