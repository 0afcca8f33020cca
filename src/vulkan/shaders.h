// The compute shaders compiled into this build: SPIR-V made by glslc at build time and embedded
// by embed_spirv.py (the list is in shaders/meson.build).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace petrel::vk {

struct EmbeddedShader {
  const char* name;  // "add", "mat_mul_q4_0": the file name, or the name given with its defines
  const uint32_t* words;
  size_t n_words;
};

// Every embedded shader; the generated shader_table.cc defines it.
std::span<const EmbeddedShader> EmbeddedShaders();
// The SPIR-V of `name`, or an empty span.
std::span<const uint32_t> ShaderCode(std::string_view name);

}  // namespace petrel::vk
