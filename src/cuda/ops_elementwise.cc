// Element-wise and row ops: add, silu_mul, gelu_mul, scale, softcap, rms_norm, head_rms_norm,
// RoPE, get_rows (kernels in elementwise.cu).
#include "cuda/elementwise.h"
#include "cuda/ops.h"

namespace petrel::cuda {
namespace {

Status NormWeightOk(const Node& node, int64_t n_cols) {
  if (node.weight == nullptr || node.weight->desc.dtype != DType::kF32 ||
      node.weight->desc.n_elems() != n_cols) {
    return Error("cuda: %s of layer %d needs an f32 weight of %lld values", OpName(node.op),
                 node.layer, (long long)n_cols);
  }
  return Status::Ok();
}

}  // namespace

Status LaunchStatus(cudaError_t error, const Node& node) {
  if (error == cudaSuccess) return Status::Ok();
  return Error("cuda: %s of layer %d: %s", OpName(node.op), node.layer, cudaGetErrorString(error));
}

Status RunElementwise(const OpContext& ctx, const Node& node, const ValueView* values) {
  const ValueView& a = values[node.inputs[0]];
  const ValueView& b = values[node.inputs[1]];
  if (a.desc.n_elems() != b.desc.n_elems() ||
      values[node.output].desc.n_elems() != a.desc.n_elems()) {
    return Error("cuda: %s of layer %d: inputs %s and %s do not match", OpName(node.op), node.layer,
                 a.desc.ShapeString().c_str(), b.desc.ShapeString().c_str());
  }
  const BinaryOp op = node.op == OpKind::kSiluMul   ? BinaryOp::kSiluMul
                      : node.op == OpKind::kGeluMul ? BinaryOp::kGeluMul
                                                    : BinaryOp::kAdd;
  return LaunchStatus(LaunchBinary(ctx.stream, op, ValuePtr(a), ValuePtr(b),
                                   ValuePtr(values[node.output]), a.desc.n_elems()),
                      node);
}

Status RunScale(const OpContext& ctx, const Node& node, const ValueView* values) {
  if (node.op == OpKind::kSoftcap && !(node.scalar > 0.0f)) {
    return Error("cuda: softcap of layer %d needs a positive cap, not %g", node.layer,
                 double(node.scalar));
  }
  const ValueView& x = values[node.inputs[0]];
  const UnaryOp op = node.op == OpKind::kSoftcap ? UnaryOp::kSoftcap : UnaryOp::kScale;
  return LaunchStatus(LaunchUnary(ctx.stream, op, ValuePtr(x), node.scalar,
                                  ValuePtr(values[node.output]), x.desc.n_elems()),
                      node);
}

Status RunRmsNorm(const OpContext& ctx, const Node& node, const ValueView* values) {
  const ValueView& x = values[node.inputs[0]];
  PETREL_RETURN_IF_ERROR(NormWeightOk(node, x.desc.ne[0]));
  return LaunchStatus(
      LaunchRmsNorm(ctx.stream, ValuePtr(x), WeightF32(*node.weight), ValuePtr(values[node.output]),
                    x.desc.ne[1], int32_t(x.desc.ne[0]), node.norm.eps),
      node);
}

Status RunHeadRmsNorm(const OpContext& ctx, const Node& node, const ValueView* values) {
  // Heads lie one after another in each row, so every head is a row of head_dim values.
  const ValueView& x = values[node.inputs[0]];
  const int64_t cols = x.desc.ne[0], head_dim = node.norm.head_dim;
  if (head_dim <= 0 || cols % head_dim != 0) {
    return Error("cuda: head_rms_norm of layer %d: %lld columns are not whole heads of %lld",
                 node.layer, (long long)cols, (long long)head_dim);
  }
  PETREL_RETURN_IF_ERROR(NormWeightOk(node, head_dim));
  return LaunchStatus(
      LaunchRmsNorm(ctx.stream, ValuePtr(x), WeightF32(*node.weight), ValuePtr(values[node.output]),
                    x.desc.ne[1] * (cols / head_dim), int32_t(head_dim), node.norm.eps),
      node);
}

Status RunRope(const OpContext& ctx, const Node& node, const ValueView* values) {
  const RopeParams& p = node.rope;
  if (p.inv_freq == nullptr || p.rot_dims < 0 || p.rot_dims % 2 != 0 || p.rot_dims > p.head_dim)
    return Error("cuda: rope of layer %d has %d rotated dimensions of %d", node.layer, p.rot_dims,
                 p.head_dim);
  const ValueView& q = values[node.inputs[0]];
  const ValueView& k = values[node.inputs[1]];
  const int64_t n_tokens = int64_t(ctx.batch.n_tokens);
  const int32_t pairs = p.rot_dims / 2;
  if (n_tokens == 0 || pairs == 0) return Status::Ok();
  if (q.desc.ne[1] != n_tokens || k.desc.ne[1] != n_tokens ||
      q.desc.ne[0] != int64_t(p.n_heads) * p.head_dim ||
      k.desc.ne[0] != int64_t(p.n_kv_heads) * p.head_dim) {
    return Error("cuda: rope of layer %d: q %s or k %s does not match its %d and %d heads of %d",
                 node.layer, q.desc.ShapeString().c_str(), k.desc.ShapeString().c_str(), p.n_heads,
                 p.n_kv_heads, p.head_dim);
  }
  PETREL_ASSIGN_OR_RETURN(const double* inv_freq, ctx.RopeTable(p.inv_freq, size_t(pairs)));
  return LaunchStatus(LaunchRope(ctx.stream, ValuePtr(q), ValuePtr(k), ctx.device_batch.positions,
                                 inv_freq, int32_t(n_tokens), p.n_heads, p.n_kv_heads, p.head_dim,
                                 pairs, p.style == RopeStyle::kHalfSplit),
                      node);
}

Status RunGetRows(const OpContext& ctx, const Node& node, const ValueView* values) {
  const ValueView& in = values[node.inputs[0]];
  const int64_t n_rows = int64_t(ctx.batch.n_selected);
  if (n_rows == 0) return Status::Ok();
  return LaunchStatus(LaunchGetRows(ctx.stream, ValuePtr(in), ctx.device_batch.selected_rows,
                                    ValuePtr(values[node.output]), n_rows, in.desc.ne[0]),
                      node);
}

}  // namespace petrel::cuda
