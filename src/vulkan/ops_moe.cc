// moe_ffn on the device, in four dispatches that never leave it: moe_route.comp routes every
// token and groups the (token, choice) pairs by expert into tiles; mat_mul.comp's MOE variants
// run gate/up (with the activation) and down over the tiles, each tile reading only its
// expert's rows of the stacked weights, so a decode step reads only the routed experts; and
// moe_combine.comp sums each token's weighted expert outputs. The expert products are the
// same per-type decoding as mat_mul (dequant.glsl), so every weight type with shaders runs.
#include <string>

#include "core/graph/moe_node.h"
#include "vulkan/matmul_common.h"
#include "vulkan/ops.h"

namespace petrel::vk {
namespace {

// moe_route.comp's limits: its shared counts, its per-token weights and group scores.
constexpr int32_t kMaxExperts = 256;
constexpr int32_t kMaxTopK = 32;
constexpr int32_t kMaxGroups = 32;
constexpr uint32_t kRouteGroup = 64;
constexpr uint32_t kCombineGroup = 64;

// Mirrors `Push` in shaders/moe_route.comp.
struct MoeRoutePush {
  uint32_t n_tokens, n_experts, top_k, max_tiles, flags, n_groups, groups_used;
  float scale;
};
// Mirrors the MOE `Push` in shaders/mat_mul.comp.
struct MoeMatMulPush {
  uint32_t n_in, n_rows, n_tokens, row_bytes, token_groups, has_bias, row_token_at, plain_silu;
  float glu_alpha, glu_limit, glu_up_offset;
};
// Mirrors `Push` in shaders/moe_combine.comp.
struct MoeCombinePush {
  uint32_t n_tokens, n_out, top_k, pair_row_at, pair_weight_at;
};

// The route buffer's layout (moe_route.comp), in uint words.
struct MoeRouteLayout {
  size_t max_tiles, row_token_at, pair_row_at, pair_weight_at, words;
  MoeRouteLayout(size_t n_pairs, size_t n_experts) {
    // Each active expert's rows make ceil(rows / TOKENS) tiles: at most n_pairs / TOKENS plus
    // one per active expert.
    max_tiles = n_pairs / kMatMulTokens + std::min(n_pairs, n_experts);
    row_token_at = 1 + 3 * max_tiles;
    pair_row_at = row_token_at + n_pairs;
    pair_weight_at = pair_row_at + n_pairs;
    words = pair_weight_at + 2 * n_pairs;  // weights, then each pair's expert
  }
};

}  // namespace

bool SupportsMoe(const Node& node) {
  if (MoeNodeError(node) != nullptr) return false;
  const MoeParams& p = node.moe;
  return p.n_experts <= kMaxExperts && p.top_k <= kMaxTopK && p.n_groups <= kMaxGroups;
}

Status RecordMoeFfn(const OpContext& ctx, const Node& node, const ValueView* values) {
  if (const char* error = MoeNodeError(node)) {
    return Error("vulkan: moe_ffn of layer %d %s", node.layer, error);
  }
  const TensorView& gate = *node.weight;
  const TensorView& up = *node.weight_up;
  const TensorView& down = *node.weight_down;
  PETREL_ASSIGN_OR_RETURN(const char* gate_suffix, ShaderSuffix(node, gate));
  PETREL_ASSIGN_OR_RETURN(const char* down_suffix, ShaderSuffix(node, down));
  const ValueView& x = values[node.inputs[0]];
  const ValueView& logits = values[node.inputs[1]];
  const ValueView& out = values[node.output];
  const MoeParams& p = node.moe;
  const size_t n_experts = size_t(p.n_experts), top_k = size_t(p.top_k);
  const size_t n_in = size_t(gate.desc.ne[0]), n_ff = size_t(gate.desc.ne[1]);
  const size_t n_out = size_t(down.desc.ne[1]);
  const size_t n_tokens = size_t(x.desc.ne[1]);
  if (size_t(x.desc.ne[0]) != n_in || size_t(logits.desc.ne[0]) != n_experts ||
      size_t(logits.desc.ne[1]) != n_tokens || size_t(out.desc.ne[0]) != n_out ||
      size_t(out.desc.ne[1]) != n_tokens) {
    return Error(
        "vulkan: moe_ffn of layer %d: input %s, router logits %s and output %s do not "
        "fit experts of %s",
        node.layer, x.desc.ShapeString().c_str(), logits.desc.ShapeString().c_str(),
        out.desc.ShapeString().c_str(), gate.desc.ShapeString().c_str());
  }
  if (n_tokens == 0) return Status::Ok();
  const size_t n_pairs = n_tokens * top_k;
  const MoeRouteLayout layout(n_pairs, n_experts);
  PETREL_ASSIGN_OR_RETURN(BufferRange route, ctx.Scratch(0, layout.words * sizeof(uint32_t)));
  PETREL_ASSIGN_OR_RETURN(BufferRange act, ctx.Scratch(1, n_pairs * n_ff * sizeof(float)));
  PETREL_ASSIGN_OR_RETURN(BufferRange y, ctx.Scratch(2, n_pairs * n_out * sizeof(float)));
  route.bytes = layout.words * sizeof(uint32_t);
  act.bytes = n_pairs * n_ff * sizeof(float);
  y.bytes = n_pairs * n_out * sizeof(float);

  // 1. Route and group.
  {
    const uint32_t flags = (p.norm_top_k ? 1u : 0u) | (p.gating == MoeGating::kSigmoid ? 2u : 0u) |
                           (node.select_bias ? 4u : 0u) |
                           (p.group_score == MoeGroupScore::kMax ? 8u : 0u);
    const MoeRoutePush push = {uint32_t(n_tokens),
                               uint32_t(n_experts),
                               uint32_t(top_k),
                               uint32_t(layout.max_tiles),
                               flags,
                               uint32_t(p.n_groups),
                               uint32_t(p.groups_used),
                               p.scale};
    // Without a selection bias the binding still needs a buffer: the logits', never read.
    const BufferRange bindings[] = {
        ValueRange(logits), node.select_bias ? WeightRange(*node.select_bias) : ValueRange(logits),
        route};
    const uint32_t spec[] = {kRouteGroup};
    PETREL_RETURN_IF_ERROR(
        ctx.recorder.Dispatch(node.op, "moe_route", spec, bindings, push, {1, 1, 1}));
  }
  const MatMulShape shape = MatMulShapeFor(ctx.caps);
  const uint32_t spec[] = {shape.group};
  const std::string sg = shape.subgroups ? "_sg" : "";
  // 2. Gate and up over each tile's gathered input rows, then the gated activation.
  {
    const MoeMatMulPush push = {uint32_t(n_in),
                                uint32_t(n_ff),
                                uint32_t(n_pairs),
                                uint32_t(gate.desc.row_bytes()),
                                uint32_t(layout.max_tiles),
                                (node.bias ? 1u : 0u) | (node.bias_up ? 2u : 0u),
                                uint32_t(layout.row_token_at),
                                p.PlainSilu() ? 1u : 0u,
                                p.glu_alpha,
                                p.glu_limit,
                                p.glu_up_offset};
    const BufferRange bindings[] = {WeightWords(gate),
                                    WeightWords(up),
                                    ValueRange(x),
                                    act,
                                    ctx.weight_grids,
                                    route,
                                    node.bias ? WeightRange(*node.bias) : ValueRange(x),
                                    node.bias_up ? WeightRange(*node.bias_up) : ValueRange(x)};
    PETREL_RETURN_IF_ERROR(
        ctx.recorder.Dispatch(node.op, std::string("moe_gated_") + gate_suffix + sg, spec, bindings,
                              push, FoldGroups(n_ff * layout.max_tiles, ctx.caps)));
  }
  // 3. Down over the grouped activation rows.
  {
    const MoeMatMulPush push = {uint32_t(n_ff),
                                uint32_t(n_out),
                                uint32_t(n_pairs),
                                uint32_t(down.desc.row_bytes()),
                                uint32_t(layout.max_tiles),
                                node.bias_down ? 1u : 0u,
                                0u,
                                1u,
                                1.0f,
                                0.0f,
                                0.0f};
    const BufferRange bindings[] = {
        WeightWords(down), act,  node.bias_down ? WeightRange(*node.bias_down) : act, y,
        ctx.weight_grids,  route};
    PETREL_RETURN_IF_ERROR(
        ctx.recorder.Dispatch(node.op, std::string("moe_down_") + down_suffix + sg, spec, bindings,
                              push, FoldGroups(n_out * layout.max_tiles, ctx.caps)));
  }
  // 4. Each token's weighted sum.
  const MoeCombinePush push = {uint32_t(n_tokens), uint32_t(n_out), uint32_t(top_k),
                               uint32_t(layout.pair_row_at), uint32_t(layout.pair_weight_at)};
  const BufferRange bindings[] = {y, route, ValueRange(out)};
  const uint32_t combine_spec[] = {kCombineGroup};
  return ctx.recorder.Dispatch(node.op, "moe_combine", combine_spec, bindings, push,
                               FoldGroups(CeilDiv(n_tokens * n_out, kCombineGroup), ctx.caps));
}

}  // namespace petrel::vk
