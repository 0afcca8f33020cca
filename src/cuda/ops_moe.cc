// moe_ffn on the CUDA device through the weight kernels of matmul/matmul.h, one launch per
// active expert and projection over that expert's rows of the stacked weights. The routing is
// the host backends' (RouteTopK, core/graph/moe_node.h), run on the host on the router logits
// copied back: one stream synchronisation per MoE layer and batch, the price of reusing the
// matmul path unchanged. Tokens are grouped by expert (experts ascending, each one's tokens in
// batch order), gathered with get_rows, projected, activated, projected down, and summed per
// token in its ranking order by moe.cu.
#include <cstring>
#include <vector>

#include "core/graph/moe_node.h"
#include "cuda/elementwise.h"
#include "cuda/matmul/matmul.h"
#include "cuda/moe.h"
#include "cuda/ops.h"

namespace petrel::cuda {
namespace {

// The batch's routing on the host: pairs (t, r) grouped by expert.
struct MoeRoutes {
  std::vector<int32_t> pair_expert, pair_row;  // (n_tokens * top_k)
  std::vector<float> pair_weight;              // (n_tokens * top_k)
  std::vector<int32_t> row_token;              // grouped row -> token
  std::vector<int32_t> first, count;           // per expert: its grouped rows
};

void Group(size_t n_experts, size_t top_k, MoeRoutes* m) {
  const size_t n_pairs = m->pair_expert.size();
  m->count.assign(n_experts, 0);
  m->first.assign(n_experts, 0);
  for (int32_t e : m->pair_expert) ++m->count[size_t(e)];
  for (size_t e = 0, row = 0; e < n_experts; ++e) {
    m->first[e] = int32_t(row);
    row += size_t(m->count[e]);
  }
  std::vector<int32_t> next = m->first;
  for (size_t i = 0; i < n_pairs; ++i) {
    const int32_t row = next[size_t(m->pair_expert[i])]++;
    m->row_token[size_t(row)] = int32_t(i / top_k);
    m->pair_row[i] = row;
  }
}

// y (n_tokens, n_rows) = x W^T (+ bias) for the n_rows rows of W at byte `w`.
Status ProjectRows(const OpContext& ctx, const Node& node, DType type, const char* w,
                   size_t row_bytes, int64_t n_rows, int64_t n_cols, const float* x,
                   int64_t n_tokens, const float* bias, float* y) {
  Scratch scratch(ctx.allocator);
  PETREL_RETURN_IF_ERROR(scratch.Take(MatMulScratchBytes(type, n_rows, n_cols, n_tokens)));
  return LaunchStatus(LaunchMatMul(ctx.stream, ctx.cublas, type, w, row_bytes, n_rows, n_cols, x,
                                   n_tokens, bias, y, scratch.data(), scratch.bytes()),
                      node);
}

}  // namespace

bool SupportsMoe(const Node& node) {
  if (MoeNodeError(node) != nullptr || !HasWeightKernels(node.weight->desc.dtype) ||
      !HasWeightKernels(node.weight_down->desc.dtype)) {
    return false;
  }
  // Each expert's matrix starts where LaunchMatMul accepts a weight (4-byte aligned).
  const TensorDesc& gate = node.weight->desc;
  const TensorDesc& down = node.weight_down->desc;
  return (size_t(gate.ne[1]) * gate.row_bytes()) % 4 == 0 &&
         (size_t(down.ne[1]) * down.row_bytes()) % 4 == 0;
}

Status RunMoeFfn(const OpContext& ctx, const Node& node, const ValueView* values) {
  if (const char* error = MoeNodeError(node)) {
    return Error("cuda: moe_ffn of layer %d %s", node.layer, error);
  }
  const TensorView& gate = *node.weight;
  const TensorView& up = *node.weight_up;
  const TensorView& down = *node.weight_down;
  const ValueView& x = values[node.inputs[0]];
  const ValueView& logits = values[node.inputs[1]];
  const ValueView& out = values[node.output];
  const MoeParams& p = node.moe;
  const size_t n_experts = size_t(p.n_experts), top_k = size_t(p.top_k);
  const int64_t n_in = gate.desc.ne[0], n_ff = gate.desc.ne[1], n_out = down.desc.ne[1];
  const int64_t n_tokens = x.desc.ne[1];
  if (x.desc.ne[0] != n_in || logits.desc.ne[0] != int64_t(n_experts) ||
      logits.desc.ne[1] != n_tokens || out.desc.ne[0] != n_out || out.desc.ne[1] != n_tokens) {
    return Error(
        "cuda: moe_ffn of layer %d: input %s, router logits %s and output %s do not fit "
        "experts of %s",
        node.layer, x.desc.ShapeString().c_str(), logits.desc.ShapeString().c_str(),
        out.desc.ShapeString().c_str(), gate.desc.ShapeString().c_str());
  }
  if (n_tokens == 0) return Status::Ok();

  // 1. Route on the host: the logits (and the selection bias) come back, the stream waits.
  std::vector<float> host_logits(size_t(n_tokens) * n_experts);
  std::vector<float> select_bias(node.select_bias ? n_experts : 0);
  PETREL_RETURN_IF_ERROR(LaunchStatus(
      cudaMemcpyAsync(host_logits.data(), ValuePtr(logits), host_logits.size() * sizeof(float),
                      cudaMemcpyDeviceToHost, ctx.stream),
      node));
  if (node.select_bias) {
    PETREL_RETURN_IF_ERROR(
        LaunchStatus(cudaMemcpyAsync(select_bias.data(), WeightF32(*node.select_bias),
                                     n_experts * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream),
                     node));
  }
  PETREL_RETURN_IF_ERROR(LaunchStatus(cudaStreamSynchronize(ctx.stream), node));
  MoeRoutes m;
  {
    const size_t n_pairs = size_t(n_tokens) * top_k;
    m.pair_expert.resize(n_pairs);
    m.pair_weight.resize(n_pairs);
    m.pair_row.resize(n_pairs);
    m.row_token.resize(n_pairs);
    std::vector<float> scratch(2 * n_experts + size_t(p.n_groups));
    for (int64_t t = 0; t < n_tokens; ++t) {
      RouteTopK(p, host_logits.data() + size_t(t) * n_experts,
                node.select_bias ? select_bias.data() : nullptr, scratch.data(),
                m.pair_expert.data() + size_t(t) * top_k, m.pair_weight.data() + size_t(t) * top_k);
    }
  }
  Group(n_experts, top_k, &m);
  const int64_t n_pairs = int64_t(m.pair_expert.size());

  // 2. The index arrays on the device: grouped row -> token, pair -> grouped row, then weights.
  Scratch indices(ctx.allocator);
  PETREL_RETURN_IF_ERROR(indices.Take(size_t(n_pairs) * 3 * sizeof(int32_t)));
  int32_t* row_token = static_cast<int32_t*>(indices.data());
  int32_t* pair_row = row_token + n_pairs;
  float* pair_weight = reinterpret_cast<float*>(pair_row + n_pairs);
  std::vector<int32_t> staged(size_t(n_pairs) * 3);
  std::memcpy(staged.data(), m.row_token.data(), size_t(n_pairs) * sizeof(int32_t));
  std::memcpy(staged.data() + n_pairs, m.pair_row.data(), size_t(n_pairs) * sizeof(int32_t));
  std::memcpy(staged.data() + 2 * n_pairs, m.pair_weight.data(), size_t(n_pairs) * sizeof(float));
  // Pageable host memory: the copy is staged before the call returns, so `staged` may go.
  PETREL_RETURN_IF_ERROR(
      LaunchStatus(cudaMemcpyAsync(row_token, staged.data(), staged.size() * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, ctx.stream),
                   node));

  // 3. The grouped input rows, then per active expert: gate, up, activation, down.
  Scratch xs(ctx.allocator), gates(ctx.allocator), acts(ctx.allocator), ys(ctx.allocator);
  PETREL_RETURN_IF_ERROR(xs.Take(size_t(n_pairs * n_in) * sizeof(float)));
  PETREL_RETURN_IF_ERROR(gates.Take(size_t(n_pairs * n_ff) * sizeof(float)));
  PETREL_RETURN_IF_ERROR(acts.Take(size_t(n_pairs * n_ff) * sizeof(float)));
  PETREL_RETURN_IF_ERROR(ys.Take(size_t(n_pairs * n_out) * sizeof(float)));
  PETREL_RETURN_IF_ERROR(LaunchStatus(
      LaunchGetRows(ctx.stream, ValuePtr(x), row_token, xs.floats(), n_pairs, n_in), node));
  const char* gate_w = static_cast<const char*>(WeightPtr(gate));
  const char* up_w = static_cast<const char*>(WeightPtr(up));
  const char* down_w = static_cast<const char*>(WeightPtr(down));
  const size_t gate_row_bytes = gate.desc.row_bytes(), down_row_bytes = down.desc.row_bytes();
  for (size_t e = 0; e < n_experts; ++e) {
    const int64_t rows = m.count[e];
    if (rows == 0) continue;
    const int64_t first = m.first[e];
    const float* x_e = xs.floats() + first * n_in;
    float* g_e = gates.floats() + first * n_ff;
    float* a_e = acts.floats() + first * n_ff;
    const size_t gate_at = e * size_t(n_ff) * gate_row_bytes;
    PETREL_RETURN_IF_ERROR(
        ProjectRows(ctx, node, gate.desc.dtype, gate_w + gate_at, gate_row_bytes, n_ff, n_in, x_e,
                    rows, node.bias ? WeightF32(*node.bias) + e * n_ff : nullptr, g_e));
    PETREL_RETURN_IF_ERROR(
        ProjectRows(ctx, node, up.desc.dtype, up_w + gate_at, gate_row_bytes, n_ff, n_in, x_e, rows,
                    node.bias_up ? WeightF32(*node.bias_up) + e * n_ff : nullptr, a_e));
  }
  if (p.PlainSilu()) {
    PETREL_RETURN_IF_ERROR(LaunchStatus(LaunchBinary(ctx.stream, BinaryOp::kSiluMul, gates.floats(),
                                                     acts.floats(), acts.floats(), n_pairs * n_ff),
                                        node));
  } else {
    PETREL_RETURN_IF_ERROR(
        LaunchStatus(LaunchClampedSwiGlu(ctx.stream, gates.floats(), acts.floats(), n_pairs * n_ff,
                                         p.glu_alpha, p.glu_limit, p.glu_up_offset),
                     node));
  }
  for (size_t e = 0; e < n_experts; ++e) {
    const int64_t rows = m.count[e];
    if (rows == 0) continue;
    const int64_t first = m.first[e];
    PETREL_RETURN_IF_ERROR(
        ProjectRows(ctx, node, down.desc.dtype, down_w + e * size_t(n_out) * down_row_bytes,
                    down_row_bytes, n_out, n_ff, acts.floats() + first * n_ff, rows,
                    node.bias_down ? WeightF32(*node.bias_down) + e * n_out : nullptr,
                    ys.floats() + first * n_out));
  }

  // 4. Each token's weighted sum.
  return LaunchStatus(LaunchMoeCombine(ctx.stream, ys.floats(), pair_row, pair_weight,
                                       ValuePtr(out), n_tokens, n_out, int32_t(top_k)),
                      node);
}

}  // namespace petrel::cuda
