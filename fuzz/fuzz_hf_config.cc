// Fuzz target: a Hugging Face config.json, read as the loader reads it: the architecture from
// `architectures` / `model_type`, that family's config (rope scaling, experts, windows, ...),
// the `quantization_config`, and the config's own consistency checks.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/model/architecture.h"
#include "core/model/hf_quant.h"
#include "core/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petrel;
  const nlohmann::json config = nlohmann::json::parse(data, data + size, nullptr,
                                                      /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) return 0;
  std::string hf_class;
  if (auto it = config.find("architectures");
      it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    hf_class = (*it)[0].get<std::string>();
  }
  std::string model_type;
  if (auto it = config.find("model_type"); it != config.end() && it->is_string()) {
    model_type = it->get<std::string>();
  }
  (void)ParseHfQuantConfig(config);
  const Architecture* arch = FindArchitectureByHf(hf_class, model_type);
  if (!arch) return 0;
  auto parsed = ConfigFromHf(config, *arch);
  if (parsed.ok()) (void)parsed->Validate();
  return 0;
}
