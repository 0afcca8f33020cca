// The ops of the Vulkan backend: what each can run (Supports*) and the function that records
// it. One file per group of ops (ops_*.cc), each with its shaders in shaders/.
#pragma once

#include <cstdint>
#include <span>

#include "core/graph/graph.h"
#include "vulkan/op_context.h"
#include "vulkan/vulkan_device.h"

namespace petrel::vk {

// Weights. Types with shaders run as stored; every other type petrel loads is converted at
// upload to UploadType(type) (the backend logs one line per converted type).
bool HasWeightShaders(DType type);
// The native type a weight of `type` is uploaded as (type itself when HasWeightShaders).
DType UploadType(DType type);
// The IQ codebooks as the weight shaders read them (shaders/dequant.glsl's offsets): the backend
// uploads them once and passes them as OpContext::weight_grids.
std::span<const uint32_t> WeightGridWords();

// Per-op support beyond the weight type (parameters, device limits).
bool SupportsAttention(const AttentionParams& params, const DeviceCaps& caps);
bool SupportsKvType(DType type);
// moe_ffn beyond its weights' types: MoeNodeError's checks and the routing shader's limits.
bool SupportsMoe(const Node& node);

// `values[v]` are the node's bound values (see Backend::Run).
Status RecordEmbed(const OpContext& ctx, const Node& node, const ValueView* values);
Status RecordRmsNorm(const OpContext& ctx, const Node& node, const ValueView* values);
// Each head_dim slice of every row RMS-normed with the one head_dim weight (q/k norms).
Status RecordHeadRmsNorm(const OpContext& ctx, const Node& node, const ValueView* values);
Status RecordMatMul(const OpContext& ctx, const Node& node, const ValueView* values);
Status RecordGatedFfn(const OpContext& ctx, const Node& node, const ValueView* values);
Status RecordRope(const OpContext& ctx, const Node& node, const ValueView* values);
Status RecordAttention(const OpContext& ctx, const Node& node, const ValueView* values,
                       const KvLayerView& kv);
// add, silu_mul and gelu_mul: out = a + b, out = silu(a) * b, out = gelu_tanh(a) * b.
Status RecordElementwise(const OpContext& ctx, const Node& node, const ValueView* values);
// scale and softcap: out = x * scalar, out = scalar * tanh(x / scalar).
Status RecordScale(const OpContext& ctx, const Node& node, const ValueView* values);
// moe_ffn: routing, grouping by expert, the experts' gate/up and down products and the
// weighted sum, all on the device (ops_moe.cc).
Status RecordMoeFfn(const OpContext& ctx, const Node& node, const ValueView* values);
Status RecordGetRows(const OpContext& ctx, const Node& node, const ValueView* values);

}  // namespace petrel::vk
