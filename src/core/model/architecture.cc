// The full tensor names of an architecture's weights in GGUF files and Hugging Face folders.
#include "core/model/architecture.h"

namespace petrel {

std::string GgufWeightName(const WeightSpec& spec, int layer) {
  if (layer < 0) return spec.gguf_name;
  return "blk." + std::to_string(layer) + "." + spec.gguf_name;
}

std::string HfWeightName(const ArchitectureFamily& family, const WeightSpec& spec, int layer) {
  if (layer < 0) return spec.hf_name;
  return family.hf_layer_prefix + std::to_string(layer) + "." + spec.hf_name;
}

}  // namespace petrel
