// The ops of the CUDA backend: what each can run (Supports*) and the function that launches it.
// One file per group of ops (ops_*.cc); the weight and attention kernels are behind the fixed
// interfaces of matmul/matmul.h and attention/attention.h, the rest in elementwise.cu.
#pragma once

#include "core/graph/graph.h"
#include "cuda/op_context.h"

namespace petrel::cuda {

// Per-op support: the node's op, weight types and parameters.
bool SupportsNode(const Node& node);
// KV cache element types attention has kernels for: F32, F16 and Q8_0.
bool SupportsKvType(DType type);
// moe_ffn: MoeNodeError's checks, weight kernels for its types, experts 4-byte aligned.
bool SupportsMoe(const Node& node);

// `values[v]` are the node's bound values (see Backend::Run).
Status RunEmbed(const OpContext& ctx, const Node& node, const ValueView* values);
Status RunMatMul(const OpContext& ctx, const Node& node, const ValueView* values);
// gate and up projections (LaunchMatMul each), then silu(gate) * up.
Status RunGatedFfn(const OpContext& ctx, const Node& node, const ValueView* values);
Status RunAttention(const OpContext& ctx, const Node& node, const ValueView* values,
                    const KvLayerView& kv);
Status RunRope(const OpContext& ctx, const Node& node, const ValueView* values);
Status RunRmsNorm(const OpContext& ctx, const Node& node, const ValueView* values);
// Each head_dim slice of every row RMS-normed with the one head_dim weight (q/k norms).
Status RunHeadRmsNorm(const OpContext& ctx, const Node& node, const ValueView* values);
// add, silu_mul and gelu_mul.
Status RunElementwise(const OpContext& ctx, const Node& node, const ValueView* values);
// scale and softcap.
Status RunScale(const OpContext& ctx, const Node& node, const ValueView* values);
// Routing on the host, then per active expert gate/up/down through LaunchMatMul (ops_moe.cc).
Status RunMoeFfn(const OpContext& ctx, const Node& node, const ValueView* values);
Status RunGetRows(const OpContext& ctx, const Node& node, const ValueView* values);

}  // namespace petrel::cuda
