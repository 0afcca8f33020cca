#include "tools/prompt_roof.h"

#include <algorithm>

namespace petrel::tools {

PromptRoof::PromptRoof(const ModelWeights& weights, int64_t experts_used) {
  size_t quantized = 0;
  for (const LayerWeights& layer : weights.layers) {
    // The matrices carry the arithmetic; norms and biases are negligible. Of an experts tensor a
    // token multiplies by its routed experts only.
    for (size_t i = 0; i < layer.size(); ++i) {
      const TensorView& view = layer[i];
      const WeightKind kind = layer.spec(i).kind;
      if (kind == WeightKind::kVector || view.data == nullptr) continue;
      const size_t n_mats = kind == WeightKind::kExperts
                                ? size_t(std::min<int64_t>(std::max<int64_t>(experts_used, 1),
                                                           view.desc.ne[2]))
                            : kind == WeightKind::kHeads ? size_t(view.desc.ne[2])
                                                         : 1;
      const size_t elems = size_t(view.desc.ne[0]) * size_t(view.desc.ne[1]) * n_mats;
      layer_params_ += elems;
      if (Traits(view.desc.dtype).block_elems > 1) quantized += elems;
    }
  }
  // The path most of the arithmetic takes (a Q4_K_M file is all quantized; an F16 one all f32).
  roof_ = 2 * quantized > layer_params_ ? cpu::Roof::kInt8Dot : cpu::Roof::kF32Fma;
}

double PromptRoof::TokensPerSecond(size_t threads) const {
  if (layer_params_ == 0) return 0.0;
  return cpu::ComputeRoofOpsPerSecond(roof_, threads) / ops_per_token();
}

}  // namespace petrel::tools
