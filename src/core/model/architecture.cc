// The full tensor names of an architecture's weights in GGUF files and Hugging Face folders, and
// the checked entry to the families' config.json readers.
#include "core/model/architecture.h"

#include <nlohmann/json.hpp>

namespace petrel {

std::string GgufWeightName(const WeightSpec& spec, int layer) {
  if (layer < 0) return spec.gguf_name;
  return "blk." + std::to_string(layer) + "." + spec.gguf_name;
}

std::string HfWeightName(const ArchitectureFamily& family, const WeightSpec& spec, int layer) {
  if (layer < 0) return spec.hf_name;
  return family.hf_layer_prefix + std::to_string(layer) + "." + spec.hf_name;
}

Result<ModelConfig> ConfigFromHf(const nlohmann::json& config, const Architecture& arch) {
  // nlohmann::json throws on a value of the wrong type; the families' readers check the fields
  // they know to be troublesome, and this catches what remains.
  try {
    return arch.config_from_hf(config, arch);
  } catch (const nlohmann::json::exception& e) {
    return Error("config.json: %s", e.what());
  }
}

}  // namespace petrel
