// Weight ops: embed (dequantize table rows), mat_mul and gated_ffn over every weight type.
#include "vulkan/ops.h"

namespace petrel::vk {

bool HasWeightShaders(DType type) { return type == DType::kF32; }

DType UploadType(DType type) { return HasWeightShaders(type) ? type : DType::kF32; }

Status RecordEmbed(const OpContext&, const Node&, const ValueView*) {
  return Error("vulkan: embed is not implemented yet");
}

Status RecordMatMul(const OpContext&, const Node&, const ValueView*) {
  return Error("vulkan: mat_mul is not implemented yet");
}

Status RecordGatedFfn(const OpContext&, const Node&, const ValueView*) {
  return Error("vulkan: gated_ffn is not implemented yet");
}

}  // namespace petrel::vk
