// The Llama family (Llama 2/3, Mistral, Qwen2): config readers, weight binding, graph.
#pragma once

#include "core/model/architecture.h"

namespace petrel {

Result<ModelConfig> LlamaConfigFromGguf(const GgufFile& file, const Architecture& arch);
Result<ModelConfig> LlamaConfigFromHf(const nlohmann::json& config, const Architecture& arch);
Status BindLlamaWeights(const ModelConfig& config, WeightSource& source, ModelWeights* weights);
void BuildLlamaGraph(const ModelConfig& config, const ModelWeights& weights, size_t n_tokens,
                     size_t n_selected, Graph* graph);

}  // namespace petrel
