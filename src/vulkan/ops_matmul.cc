// Weight ops: embed (dequantize table rows), mat_mul and gated_ffn over every weight type.
// Shaders: shaders/embed.comp and shaders/mat_mul.comp, one variant per weight type, all
// decoding blocks with shaders/dequant.glsl.
#include <iterator>
#include <string>
#include <vector>

#include "quant/iq_grids.h"  // kIQ2XXSGrid ... kIQ1SGrid
#include "vulkan/matmul_common.h"
#include "vulkan/ops.h"

namespace petrel::vk {
namespace {

// The device's row per weight type: the shader-name suffix of the types with shaders of their own
// (shaders/meson.build lists the same types).
struct WeightShaders {
  DType type;
  const char* suffix;
};
constexpr WeightShaders kWeightShaders[] = {
    {DType::kF32, "f32"},       {DType::kF16, "f16"},       {DType::kBF16, "bf16"},
    {DType::kQ4_0, "q4_0"},     {DType::kQ4_1, "q4_1"},     {DType::kQ5_0, "q5_0"},
    {DType::kQ5_1, "q5_1"},     {DType::kQ8_0, "q8_0"},     {DType::kQ2_K, "q2_k"},
    {DType::kQ3_K, "q3_k"},     {DType::kQ4_K, "q4_k"},     {DType::kQ5_K, "q5_k"},
    {DType::kQ6_K, "q6_k"},     {DType::kIQ4_NL, "iq4_nl"}, {DType::kIQ4_XS, "iq4_xs"},
    {DType::kIQ1_S, "iq1_s"},   {DType::kIQ1_M, "iq1_m"},   {DType::kIQ2_XXS, "iq2_xxs"},
    {DType::kIQ2_XS, "iq2_xs"}, {DType::kIQ2_S, "iq2_s"},   {DType::kIQ3_XXS, "iq3_xxs"},
    {DType::kIQ3_S, "iq3_s"},   {DType::kTQ1_0, "tq1_0"},   {DType::kTQ2_0, "tq2_0"},
    {DType::kMXFP4, "mxfp4"},   {DType::kQ1_0, "q1_0"},     {DType::kQ2_0, "q2_0"},
};

// The types without shaders that are converted at upload (dequantized on the host, then
// encoded as the type named here), or nothing.
struct UploadConversion {
  DType type;
  DType upload;
};
constexpr UploadConversion kUploadConversions[] = {
    // 8-bit block formats of whole 32-element blocks: Q8_0 keeps their precision.
    {DType::kQ8_1, DType::kQ8_0},
    {DType::kQ8_K, DType::kQ8_0},
};

const char* TypeSuffix(DType type) {
  for (const WeightShaders& row : kWeightShaders) {
    if (row.type == type) return row.suffix;
  }
  return nullptr;
}

// Embed: invocations per workgroup, each decoding 8 elements of a row.
constexpr uint32_t kEmbedGroup = 64;
// Mirrors `Push` in shaders/embed.comp.
struct EmbedPush {
  uint32_t dim, n_rows, n_tokens, row_bytes, groups_per_token;
};

// Mirrors `Push` in shaders/mat_mul.comp.
struct MatMulPush {
  uint32_t n_in, n_rows, n_tokens, row_bytes, token_groups, has_bias;
};

// Checks shapes shared by mat_mul and gated_ffn: x is (n_tokens, n_in), out is (n_tokens, n_rows).
Status CheckMatMulShapes(const Node& node, const TensorView& w, const ValueView& x,
                         const ValueView& out) {
  if (x.desc.ne[0] != w.desc.ne[0] || out.desc.ne[0] != w.desc.ne[1] ||
      out.desc.ne[1] != x.desc.ne[1]) {
    return Error("vulkan: %s of layer %d: weight %s, input %s and output %s do not match",
                 OpName(node.op), node.layer, w.desc.ShapeString().c_str(),
                 x.desc.ShapeString().c_str(), out.desc.ShapeString().c_str());
  }
  return Status::Ok();
}

}  // namespace

BufferRange WeightWords(const TensorView& weight) {
  BufferRange range = WeightRange(weight);
  range.bytes = (range.bytes + 3) & ~VkDeviceSize(3);
  return range;
}

Result<const char*> ShaderSuffix(const Node& node, const TensorView& weight) {
  const char* suffix = TypeSuffix(weight.desc.dtype);
  if (suffix == nullptr) {
    return Error("vulkan: %s of layer %d: no shader for weight type %s", OpName(node.op),
                 node.layer, DTypeName(weight.desc.dtype));
  }
  return suffix;
}

MatMulShape MatMulShapeFor(const DeviceCaps& caps) {
  uint32_t group = kMatMulGroup;
  const bool subgroups = caps.subgroup_size != 0;
  while (subgroups && group < caps.subgroup_size && group * 2 <= caps.max_workgroup_size_x) {
    group *= 2;
  }
  return {group, subgroups};
}

bool HasWeightShaders(DType type) { return TypeSuffix(type) != nullptr; }

// dequant.glsl's offsets: kIQ1SGrid starts at word 4352, and the buffer ends at 8448.
static_assert(2 * (std::size(quant::kIQ2XXSGrid) + std::size(quant::kIQ2XSGrid) +
                   std::size(quant::kIQ2SGrid)) +
                  std::size(quant::kIQ3XXSGrid) + std::size(quant::kIQ3SGrid) ==
              4352);
static_assert(2 * std::size(quant::kIQ1SGrid) == 8448 - 4352);

std::span<const uint32_t> WeightGridWords() {
  static const std::vector<uint32_t> words = [] {
    std::vector<uint32_t> out;
    auto add = [&](const auto& grid) {
      for (const auto entry : grid) {
        out.push_back(uint32_t(entry));
        if constexpr (sizeof(entry) == 8) out.push_back(uint32_t(uint64_t(entry) >> 32));
      }
    };
    // The order and offsets of dequant.glsl's kIQ2XXSGrid ... kIQ1SGrid.
    add(quant::kIQ2XXSGrid);
    add(quant::kIQ2XSGrid);
    add(quant::kIQ2SGrid);
    add(quant::kIQ3XXSGrid);
    add(quant::kIQ3SGrid);
    add(quant::kIQ1SGrid);
    return out;
  }();
  return words;
}

DType UploadType(DType type) {
  if (HasWeightShaders(type)) return type;
  for (const UploadConversion& row : kUploadConversions) {
    if (row.type == type) return row.upload;
  }
  return DType::kF32;
}

Status RecordEmbed(const OpContext& ctx, const Node& node, const ValueView* values) {
  const TensorView& table = *node.weight;
  PETREL_ASSIGN_OR_RETURN(const char* suffix, ShaderSuffix(node, table));
  const ValueView& out = values[node.output];
  const size_t dim = size_t(table.desc.ne[0]);
  const size_t n_tokens = size_t(out.desc.ne[1]);
  if (size_t(out.desc.ne[0]) != dim || n_tokens != ctx.batch.n_tokens) {
    return Error("vulkan: embed: table %s and output %s do not match a batch of %zu tokens",
                 table.desc.ShapeString().c_str(), out.desc.ShapeString().c_str(),
                 ctx.batch.n_tokens);
  }
  if (n_tokens == 0) return Status::Ok();
  const uint32_t groups_per_token = CeilDiv(CeilDiv(dim, 8), kEmbedGroup);
  const EmbedPush push = {uint32_t(dim), uint32_t(table.desc.n_rows()), uint32_t(n_tokens),
                          uint32_t(table.desc.row_bytes()), groups_per_token};
  const BufferRange bindings[] = {WeightWords(table), ctx.device_batch.tokens, ValueRange(out),
                                  ctx.weight_grids};
  const uint32_t spec[] = {kEmbedGroup};
  return ctx.recorder.Dispatch(node.op, std::string("embed_") + suffix, spec, bindings, push,
                               FoldGroups(n_tokens * groups_per_token, ctx.caps));
}

Status RecordMatMul(const OpContext& ctx, const Node& node, const ValueView* values) {
  const TensorView& w = *node.weight;
  PETREL_ASSIGN_OR_RETURN(const char* suffix, ShaderSuffix(node, w));
  const ValueView& x = values[node.inputs[0]];
  const ValueView& out = values[node.output];
  PETREL_RETURN_IF_ERROR(CheckMatMulShapes(node, w, x, out));
  const size_t n_rows = size_t(w.desc.ne[1]), n_tokens = size_t(x.desc.ne[1]);
  if (node.bias != nullptr && size_t(node.bias->desc.n_elems()) != n_rows) {
    return Error("vulkan: mat_mul of layer %d: bias %s for %zu rows", node.layer,
                 node.bias->desc.ShapeString().c_str(), n_rows);
  }
  if (n_tokens == 0 || n_rows == 0) return Status::Ok();
  const uint32_t token_groups = CeilDiv(n_tokens, kMatMulTokens);
  const MatMulPush push = {uint32_t(w.desc.ne[0]), uint32_t(n_rows),  uint32_t(n_tokens),
                           uint32_t(w.desc.row_bytes()), token_groups,
                           node.bias != nullptr ? 1u : 0u};
  // Without a bias the binding still needs a buffer: the output's, which the shader never reads.
  const BufferRange bindings[] = {WeightWords(w), ValueRange(x),
                                  node.bias != nullptr ? WeightRange(*node.bias) : ValueRange(out),
                                  ValueRange(out), ctx.weight_grids};
  const MatMulShape shape = MatMulShapeFor(ctx.caps);
  const uint32_t spec[] = {shape.group};
  return ctx.recorder.Dispatch(
      node.op, std::string("mat_mul_") + suffix + (shape.subgroups ? "_sg" : ""), spec, bindings,
      push, FoldGroups(n_rows * token_groups, ctx.caps));
}

Status RecordGatedFfn(const OpContext& ctx, const Node& node, const ValueView* values) {
  const TensorView& gate = *node.weight;
  if (node.weight_up == nullptr || node.weight_up->desc.dtype != gate.desc.dtype ||
      !node.weight_up->desc.SameShape(gate.desc)) {
    return Error("vulkan: gated_ffn of layer %d needs gate and up weights of one type and shape",
                 node.layer);
  }
  const TensorView& up = *node.weight_up;
  PETREL_ASSIGN_OR_RETURN(const char* suffix, ShaderSuffix(node, gate));
  const ValueView& x = values[node.inputs[0]];
  const ValueView& out = values[node.output];
  PETREL_RETURN_IF_ERROR(CheckMatMulShapes(node, gate, x, out));
  const size_t n_rows = size_t(gate.desc.ne[1]), n_tokens = size_t(x.desc.ne[1]);
  if (n_tokens == 0 || n_rows == 0) return Status::Ok();
  const uint32_t token_groups = CeilDiv(n_tokens, kMatMulTokens);
  const MatMulPush push = {uint32_t(gate.desc.ne[0]), uint32_t(n_rows), uint32_t(n_tokens),
                           uint32_t(gate.desc.row_bytes()), token_groups, 0u};
  const BufferRange bindings[] = {WeightWords(gate), WeightWords(up), ValueRange(x),
                                  ValueRange(out), ctx.weight_grids};
  const MatMulShape shape = MatMulShapeFor(ctx.caps);
  const uint32_t spec[] = {shape.group};
  return ctx.recorder.Dispatch(
      node.op, std::string("gated_ffn_") + suffix + (shape.subgroups ? "_sg" : ""), spec,
      bindings, push, FoldGroups(n_rows * token_groups, ctx.caps));
}

}  // namespace petrel::vk
