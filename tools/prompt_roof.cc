#include "tools/prompt_roof.h"

namespace petrel::tools {

PromptRoof::PromptRoof(const ModelWeights& weights) {
  size_t quantized = 0;
  for (const LayerWeights& layer : weights.layers) {
    // The matrices carry the arithmetic; norms and biases are negligible.
    for (size_t i = 0; i < layer.size(); ++i) {
      const TensorView& view = layer[i];
      if (layer.spec(i).kind != WeightKind::kMatrix || view.data == nullptr) continue;
      const size_t elems = size_t(view.desc.ne[0]) * size_t(view.desc.ne[1]);
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
