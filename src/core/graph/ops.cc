// Op names for logs and errors.
#include "core/graph/ops.h"

namespace petrel {

const char* OpName(OpKind op) {
  switch (op) {
    case OpKind::kEmbed: return "embed";
    case OpKind::kRmsNorm: return "rms_norm";
    case OpKind::kMatMul: return "mat_mul";
    case OpKind::kRope: return "rope";
    case OpKind::kAttention: return "attention";
    case OpKind::kSiluMul: return "silu_mul";
    case OpKind::kGatedFfn: return "gated_ffn";
    case OpKind::kAdd: return "add";
    case OpKind::kGetRows: return "get_rows";
    case OpKind::kHeadRmsNorm: return "head_rms_norm";
    case OpKind::kGeluMul: return "gelu_mul";
    case OpKind::kScale: return "scale";
    case OpKind::kSoftcap: return "softcap";
    case OpKind::kMoeFfn: return "moe_ffn";
    case OpKind::kLayerNorm: return "layer_norm";
    case OpKind::kGelu: return "gelu";
    case OpKind::kAddRows: return "add_rows";
    case OpKind::kMlaAttention: return "mla_attention";
    case OpKind::kScaleRows: return "scale_rows";
    case OpKind::kCount: break;
  }
  return "?";
}

}  // namespace petrel
