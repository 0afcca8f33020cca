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

// Mixture-of-experts hyperparameters: GGUF `<arch>.expert_count`, `expert_used_count`,
// `expert_feed_forward_length` (default `default_ffn`) and `expert_weights_norm` (default true).
Status ReadGgufExperts(const GgufFile& file, const Architecture& arch, int64_t default_ffn,
                       ModelConfig* config);
// The same from config.json: the expert count under `count_field`, `num_experts_per_tok`, the
// width under `ffn_field` (nullptr or absent: `intermediate_size`), renormalisation under
// `norm_field` (nullptr or absent: `default_norm`). No count field: a dense model.
Status ReadHfExperts(const nlohmann::json& json, const char* count_field, const char* ffn_field,
                     const char* norm_field, bool default_norm, ModelConfig* config);

}  // namespace petrel
