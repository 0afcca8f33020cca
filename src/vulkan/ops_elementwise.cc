// Element-wise and row ops: add, silu_mul, rms_norm, get_rows.
#include "vulkan/ops.h"

namespace petrel::vk {
namespace {

constexpr uint32_t kElementwiseGroup = 256;
// Row reductions (rms_norm): a power of two (the shader's tree reduction), at most 128, the
// least maxComputeWorkGroupSize[0] Vulkan guarantees.
constexpr uint32_t kRowGroup = 128;

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

Status RecordRmsNorm(const OpContext& ctx, const Node& node, const ValueView* values) {
  const ValueView& x = values[node.inputs[0]];
  const uint32_t n_cols = uint32_t(x.desc.ne[0]), n_rows = uint32_t(x.desc.ne[1]);
  if (node.weight == nullptr || node.weight->desc.dtype != DType::kF32 ||
      node.weight->desc.ne[0] != int64_t(n_cols)) {
    return Error("vulkan: rms_norm of layer %d needs an f32 weight of %u values", node.layer,
                 n_cols);
  }
  const struct {
    uint32_t n_rows, n_cols;
    float eps;
  } push = {n_rows, n_cols, node.norm.eps};
  const BufferRange bindings[] = {ValueRange(x), WeightRange(*node.weight),
                                  ValueRange(values[node.output])};
  const uint32_t spec[] = {kRowGroup};
  return ctx.recorder.Dispatch(node.op, "rms_norm", spec, bindings, push,
                               FoldGroups(n_rows, ctx.caps));
}

Status RecordGetRows(const OpContext& ctx, const Node& node, const ValueView* values) {
  const ValueView& in = values[node.inputs[0]];
  const uint32_t n_cols = uint32_t(in.desc.ne[0]);
  const uint32_t n_rows = uint32_t(ctx.batch.n_selected);
  if (n_rows == 0) return Status::Ok();  // nothing selected: no rows to bind
  const struct { uint32_t n_rows, n_cols; } push = {n_rows, n_cols};
  const BufferRange bindings[] = {ValueRange(in), ctx.device_batch.selected_rows,
                                  ValueRange(values[node.output])};
  const uint32_t spec[] = {kElementwiseGroup};
  const size_t n = size_t(n_rows) * n_cols;
  return ctx.recorder.Dispatch(node.op, "get_rows", spec, bindings, push,
                               FoldGroups((n + kElementwiseGroup - 1) / kElementwiseGroup, ctx.caps));
}

}  // namespace petrel::vk
