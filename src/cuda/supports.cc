// What the CUDA backend runs: per op, the weight types the weight kernels have, the attention
// parameters the attention kernels take, and the parameters of the backend's own kernels. A layer
// with a node outside this stays on the CPU (the engine's placement notes say why).
#include "cuda/attention/attention.h"
#include "cuda/matmul/matmul.h"
#include "cuda/ops.h"

namespace petrel::cuda {

bool SupportsNode(const Node& node) {
  auto weight_ok = [](const TensorView* w) {
    return w != nullptr && HasWeightKernels(w->desc.dtype);
  };
  switch (node.op) {
    case OpKind::kMatMul:
      return weight_ok(node.weight) &&
             (node.bias == nullptr || node.bias->desc.dtype == DType::kF32);
    case OpKind::kEmbed:
      return weight_ok(node.weight);
    case OpKind::kGatedFfn:
      return weight_ok(node.weight) && weight_ok(node.weight_up) &&
             node.weight->desc.dtype == node.weight_up->desc.dtype;
    case OpKind::kAttention: {
      // The cache type is chosen after placement: a layer goes to the device only when its
      // attention has kernels for every cache type the device keeps.
      const AttentionParams& p = node.attention;
      if (!p.causal) return false;  // bidirectional attention runs on the host
      if (p.n_kv_heads <= 0 || p.n_heads % p.n_kv_heads != 0) return false;
      if (p.sinks != nullptr) return false;  // no kernel takes attention sinks
      for (DType kv : {DType::kF32, DType::kF16, DType::kQ8_0}) {
        if (!SupportsAttention(p, kv)) return false;
      }
      return true;
    }
    case OpKind::kRope:
      // YaRN's attention factor is not in the kernel: such layers stay on the CPU.
      return node.rope.inv_freq != nullptr && node.rope.rot_dims % 2 == 0 &&
             node.rope.rot_dims <= node.rope.head_dim && node.rope.attn_factor == 1.0f;
    case OpKind::kRmsNorm:
      return node.weight != nullptr && node.weight->desc.dtype == DType::kF32;
    case OpKind::kHeadRmsNorm:
      return node.weight != nullptr && node.weight->desc.dtype == DType::kF32 &&
             node.norm.head_dim > 0 && node.weight->desc.n_elems() == node.norm.head_dim;
    case OpKind::kSoftcap:
      return node.scalar > 0.0f;
    case OpKind::kSiluMul:
    case OpKind::kGeluMul:
    case OpKind::kAdd:
    case OpKind::kScale:
    case OpKind::kGetRows:
      return true;
    case OpKind::kMoeFfn:  // routed on the host, experts on the device (ops_moe.cc)
      return SupportsMoe(node);
    case OpKind::kLayerNorm:  // the encoder's ops run on the host
    case OpKind::kGelu:
    case OpKind::kAddRows:
    case OpKind::kMlaAttention:  // latent attention runs on the host backends (the layer moves)
    case OpKind::kScaleRows:     // per-sequence LoRA scales: the adapted layers run on the CPU
      return false;
    case OpKind::kCount:
      break;
  }
  return false;
}

}  // namespace petrel::cuda
