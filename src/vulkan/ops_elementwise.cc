// Element-wise and row ops: add, silu_mul, rms_norm, get_rows.
#include "vulkan/ops.h"

namespace petrel::vk {
namespace {

constexpr uint32_t kElementwiseGroup = 256;

}  // namespace

Status RecordElementwise(const OpContext& ctx, const Node& node, const ValueView* values) {
  const ValueView& a = values[node.inputs[0]];
  const uint32_t n = uint32_t(a.desc.n_elems());
  const struct { uint32_t n; } push = {n};
  const BufferRange bindings[] = {ValueRange(a), ValueRange(values[node.inputs[1]]),
                                  ValueRange(values[node.output])};
  const uint32_t spec[] = {kElementwiseGroup};
  return ctx.recorder.Dispatch(node.op, node.op == OpKind::kSiluMul ? "silu_mul" : "add", spec,
                               bindings, push,
                               FoldGroups((n + kElementwiseGroup - 1) / kElementwiseGroup, ctx.caps));
}

Status RecordRmsNorm(const OpContext&, const Node&, const ValueView*) {
  return Error("vulkan: rms_norm is not implemented yet");
}

Status RecordGetRows(const OpContext&, const Node&, const ValueView*) {
  return Error("vulkan: get_rows is not implemented yet");
}

}  // namespace petrel::vk
