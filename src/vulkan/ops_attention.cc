// RoPE and attention over the paged KV cache.
#include "vulkan/ops.h"

namespace petrel::vk {

bool SupportsAttention(const AttentionParams&, const DeviceCaps&) { return false; }

bool SupportsKvType(DType type) { return type == DType::kF32; }

Status RecordRope(const OpContext&, const Node&, const ValueView*) {
  return Error("vulkan: rope is not implemented yet");
}

Status RecordAttention(const OpContext&, const Node&, const ValueView*, const KvLayerView&) {
  return Error("vulkan: attention is not implemented yet");
}

}  // namespace petrel::vk
