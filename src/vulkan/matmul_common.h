// What the weight ops share (ops_matmul.cc, ops_moe.cc): workgroup shapes of mat_mul.comp, the
// shader suffix of a weight type, and a weight's binding.
#pragma once

#include <cstddef>
#include <cstdint>

#include "vulkan/op_context.h"

namespace petrel::vk {

// mat_mul / gated_ffn: invocations per workgroup (a power of two: the shared-memory reduction
// halves it) and tokens per workgroup (TOKENS in mat_mul.comp: each decoded weight block serves
// that many tokens).
constexpr uint32_t kMatMulGroup = 64;
constexpr uint32_t kMatMulTokens = 8;

inline uint32_t CeilDiv(size_t a, size_t b) { return uint32_t((a + b - 1) / b); }

// A weight's range for a shader that reads it as uint words: rounded up to whole words, so the
// word holding a row's last bytes is inside the binding (robust buffer access may read a word
// that ends past the range as 0). The pool aligns every allocation's size to at least 4 bytes,
// so those bytes are the weight's own.
BufferRange WeightWords(const TensorView& weight);

// The shader-name suffix of `weight`'s type ("q4_k"), or an error naming the node.
Result<const char*> ShaderSuffix(const Node& node, const TensorView& weight);

// The workgroup size and shader variant of mat_mul / gated_ffn on this device: the subgroupAdd
// variant where compute shaders have subgroup arithmetic, with at least one whole subgroup.
struct MatMulShape {
  uint32_t group;
  bool subgroups;
};
MatMulShape MatMulShapeFor(const DeviceCaps& caps);

}  // namespace petrel::vk
