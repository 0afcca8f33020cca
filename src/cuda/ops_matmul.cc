// Weight ops: embed, mat_mul and gated_ffn, through the weight kernels of matmul/matmul.h (one
// launch per projection, scratch from the allocator).
#include "cuda/elementwise.h"
#include "cuda/matmul/matmul.h"
#include "cuda/ops.h"

namespace petrel::cuda {
namespace {

// x is (n_tokens, n_in), out is (n_tokens, n_rows).
Status CheckMatMulShapes(const Node& node, const TensorView& w, const ValueView& x,
                         const ValueView& out) {
  if (x.desc.ne[0] != w.desc.ne[0] || out.desc.ne[0] != w.desc.ne[1] ||
      out.desc.ne[1] != x.desc.ne[1]) {
    return Error("cuda: %s of layer %d: weight %s, input %s and output %s do not match",
                 OpName(node.op), node.layer, w.desc.ShapeString().c_str(),
                 x.desc.ShapeString().c_str(), out.desc.ShapeString().c_str());
  }
  return Status::Ok();
}

Status WeightTypeOk(const Node& node, const TensorView& w) {
  if (!HasWeightKernels(w.desc.dtype)) {
    return Error("cuda: %s of layer %d: no kernels for weight type %s", OpName(node.op), node.layer,
                 DTypeName(w.desc.dtype));
  }
  return Status::Ok();
}

// y = x W^T (+ bias) with scratch from the allocator.
Status Project(const OpContext& ctx, const Node& node, const TensorView& w, const float* x,
               int64_t n_tokens, const float* bias, float* y) {
  const int64_t n_rows = w.desc.ne[1], n_cols = w.desc.ne[0];
  Scratch scratch(ctx.allocator);
  PETREL_RETURN_IF_ERROR(scratch.Take(MatMulScratchBytes(w.desc.dtype, n_rows, n_cols, n_tokens)));
  return LaunchStatus(
      LaunchMatMul(ctx.stream, ctx.cublas, w.desc.dtype, WeightPtr(w), w.desc.row_bytes(), n_rows,
                   n_cols, x, n_tokens, bias, y, scratch.data(), scratch.bytes()),
      node);
}

}  // namespace

Status RunEmbed(const OpContext& ctx, const Node& node, const ValueView* values) {
  const TensorView& table = *node.weight;
  PETREL_RETURN_IF_ERROR(WeightTypeOk(node, table));
  const ValueView& out = values[node.output];
  const int64_t dim = table.desc.ne[0];
  const int64_t n_tokens = out.desc.ne[1];
  if (out.desc.ne[0] != dim || size_t(n_tokens) != ctx.batch.n_tokens) {
    return Error("cuda: embed: table %s and output %s do not match a batch of %zu tokens",
                 table.desc.ShapeString().c_str(), out.desc.ShapeString().c_str(),
                 ctx.batch.n_tokens);
  }
  if (n_tokens == 0) return Status::Ok();
  return LaunchStatus(
      LaunchEmbedRows(ctx.stream, table.desc.dtype, WeightPtr(table), table.desc.row_bytes(), dim,
                      ctx.device_batch.tokens, n_tokens, ValuePtr(out)),
      node);
}

Status RunMatMul(const OpContext& ctx, const Node& node, const ValueView* values) {
  const TensorView& w = *node.weight;
  PETREL_RETURN_IF_ERROR(WeightTypeOk(node, w));
  const ValueView& x = values[node.inputs[0]];
  const ValueView& out = values[node.output];
  PETREL_RETURN_IF_ERROR(CheckMatMulShapes(node, w, x, out));
  const int64_t n_rows = w.desc.ne[1], n_tokens = x.desc.ne[1];
  if (node.bias != nullptr &&
      (node.bias->desc.dtype != DType::kF32 || node.bias->desc.n_elems() != n_rows)) {
    return Error("cuda: mat_mul of layer %d: bias %s for %lld rows", node.layer,
                 node.bias->desc.ShapeString().c_str(), (long long)n_rows);
  }
  if (n_tokens == 0 || n_rows == 0) return Status::Ok();
  return Project(ctx, node, w, ValuePtr(x), n_tokens,
                 node.bias != nullptr ? WeightF32(*node.bias) : nullptr, ValuePtr(out));
}

Status RunGatedFfn(const OpContext& ctx, const Node& node, const ValueView* values) {
  const TensorView& gate = *node.weight;
  if (node.weight_up == nullptr || node.weight_up->desc.dtype != gate.desc.dtype ||
      !node.weight_up->desc.SameShape(gate.desc)) {
    return Error("cuda: gated_ffn of layer %d needs gate and up weights of one type and shape",
                 node.layer);
  }
  PETREL_RETURN_IF_ERROR(WeightTypeOk(node, gate));
  const ValueView& x = values[node.inputs[0]];
  const ValueView& out = values[node.output];
  PETREL_RETURN_IF_ERROR(CheckMatMulShapes(node, gate, x, out));
  const int64_t n_rows = gate.desc.ne[1], n_tokens = x.desc.ne[1];
  if (n_tokens == 0 || n_rows == 0) return Status::Ok();
  // The gate projection goes straight into `out`; up into scratch; then out = silu(out) * up.
  Scratch up(ctx.allocator);
  PETREL_RETURN_IF_ERROR(up.Take(size_t(n_tokens * n_rows) * sizeof(float)));
  float* y = ValuePtr(out);
  PETREL_RETURN_IF_ERROR(Project(ctx, node, gate, ValuePtr(x), n_tokens, nullptr, y));
  PETREL_RETURN_IF_ERROR(
      Project(ctx, node, *node.weight_up, ValuePtr(x), n_tokens, nullptr, up.floats()));
  return LaunchStatus(
      LaunchBinary(ctx.stream, BinaryOp::kSiluMul, y, up.floats(), y, n_tokens * n_rows), node);
}

}  // namespace petrel::cuda
