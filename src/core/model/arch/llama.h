// The Llama family (Llama 2/3, Mistral, Qwen2). Its registry entry is `kLlamaFamily`; the config
// readers and writer are declared for families that share Llama's hyperparameter keys.
#pragma once

#include "core/model/architecture.h"

namespace petrel {

extern const ArchitectureFamily kLlamaFamily;

ConfigFromGgufFn LlamaConfigFromGguf;
ConfigFromHfFn LlamaConfigFromHf;
ConfigToGgufFn LlamaConfigToGguf;
BuildGraphFn BuildLlamaGraph;

}  // namespace petrel
