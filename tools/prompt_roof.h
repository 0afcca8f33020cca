// The prompt roof of a model on this machine: 2 operations per layer weight and token at the
// arithmetic peak of the path the weights take (the int8 dot step for block-quantized weights,
// f32 FMAs for F32/F16/BF16), the bound ../shared/BASELINES.md sets prompt speed against.
// `petrel bench` measures the peak next to each prompt run, so that the fraction of the bound
// is a same-machine, same-moment figure.
#pragma once

#include <cstddef>

#include "core/model/architecture.h"  // ModelWeights
#include "cpu/roofs/compute_roof.h"

namespace petrel::tools {

class PromptRoof {
 public:
  // `experts_used`: how many experts of each experts tensor one token runs (0: a dense model).
  explicit PromptRoof(const ModelWeights& weights, int64_t experts_used = 0);

  bool available() const { return cpu::ComputeRoofAvailable(); }
  double ops_per_token() const { return 2.0 * double(layer_params_); }
  cpu::Roof roof() const { return roof_; }
  // Tokens per second of a prompt that ran at the measured peak with `threads` threads.
  double TokensPerSecond(size_t threads) const;

 private:
  size_t layer_params_ = 0;  // weight-matrix elements of the blocks (not embeddings, not output)
  cpu::Roof roof_ = cpu::Roof::kF32Fma;
};

}  // namespace petrel::tools
