// Element-wise and row ops: add, silu_mul, gelu_mul, scale, softcap, rms_norm, head_rms_norm,
// get_rows.
#include "vulkan/ops.h"

namespace petrel::vk {
namespace {

constexpr uint32_t kElementwiseGroup = 256;
// Row reductions (rms_norm): a power of two (the shader's tree reduction), at most 128, the
// least maxComputeWorkGroupSize[0] Vulkan guarantees.
constexpr uint32_t kRowGroup = 128;

const char* ElementwiseShader(OpKind op) {
  return op == OpKind::kSiluMul ? "silu_mul" : op == OpKind::kGeluMul ? "gelu_mul" : "add";
}

// rms_norm.comp over n_rows rows of n_cols values, each scaled by the one n_cols weight.
Status DispatchRmsNorm(const OpContext& ctx, const Node& node, const ValueView* values,
                       uint32_t n_rows, uint32_t n_cols) {
  if (node.weight == nullptr || node.weight->desc.dtype != DType::kF32 ||
      node.weight->desc.n_elems() != int64_t(n_cols)) {
    return Error("vulkan: %s of layer %d needs an f32 weight of %u values", OpName(node.op),
                 node.layer, n_cols);
  }
  const struct {
    uint32_t n_rows, n_cols;
    float eps;
  } push = {n_rows, n_cols, node.norm.eps};
  const BufferRange bindings[] = {ValueRange(values[node.inputs[0]]), WeightRange(*node.weight),
                                  ValueRange(values[node.output])};
  const uint32_t spec[] = {kRowGroup};
  return ctx.recorder.Dispatch(node.op, "rms_norm", spec, bindings, push,
                               FoldGroups(n_rows, ctx.caps));
}

}  // namespace

Status RecordElementwise(const OpContext& ctx, const Node& node, const ValueView* values) {
  const ValueView& a = values[node.inputs[0]];
  const uint32_t n = uint32_t(a.desc.n_elems());
  const struct { uint32_t n; } push = {n};
  const BufferRange bindings[] = {ValueRange(a), ValueRange(values[node.inputs[1]]),
                                  ValueRange(values[node.output])};
  const uint32_t spec[] = {kElementwiseGroup};
  return ctx.recorder.Dispatch(node.op, ElementwiseShader(node.op), spec, bindings, push,
                               FoldGroups((n + kElementwiseGroup - 1) / kElementwiseGroup, ctx.caps));
}

Status RecordScale(const OpContext& ctx, const Node& node, const ValueView* values) {
  if (node.op == OpKind::kSoftcap && !(node.scalar > 0.0f)) {
    return Error("vulkan: softcap of layer %d needs a positive cap, not %g", node.layer,
                 double(node.scalar));
  }
  const ValueView& x = values[node.inputs[0]];
  const uint32_t n = uint32_t(x.desc.n_elems());
  const struct {
    uint32_t n;
    float scalar;
  } push = {n, node.scalar};
  const BufferRange bindings[] = {ValueRange(x), ValueRange(values[node.output])};
  const uint32_t spec[] = {kElementwiseGroup};
  return ctx.recorder.Dispatch(node.op, node.op == OpKind::kSoftcap ? "softcap" : "scale", spec,
                               bindings, push,
                               FoldGroups((n + kElementwiseGroup - 1) / kElementwiseGroup, ctx.caps));
}

Status RecordRmsNorm(const OpContext& ctx, const Node& node, const ValueView* values) {
  const ValueView& x = values[node.inputs[0]];
  return DispatchRmsNorm(ctx, node, values, uint32_t(x.desc.ne[1]), uint32_t(x.desc.ne[0]));
}

Status RecordHeadRmsNorm(const OpContext& ctx, const Node& node, const ValueView* values) {
  // Heads lie one after another in each row, so every head is a row of head_dim values for
  // the plain rms_norm shader.
  const ValueView& x = values[node.inputs[0]];
  const int64_t cols = x.desc.ne[0], head_dim = node.norm.head_dim;
  if (head_dim <= 0 || cols % head_dim != 0) {
    return Error("vulkan: head_rms_norm of layer %d: %lld columns are not whole heads of %lld",
                 node.layer, (long long)cols, (long long)head_dim);
  }
  return DispatchRmsNorm(ctx, node, values, uint32_t(x.desc.ne[1] * (cols / head_dim)),
                         uint32_t(head_dim));
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
