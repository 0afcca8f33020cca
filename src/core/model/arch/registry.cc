// The only list of architectures: each row names a family's config reader, weight binder and
// graph builder. Llama, Mistral and Qwen2 share one family that differs only in data.
#include <iterator>
#include <string>

#include "core/model/arch/llama.h"
#include "core/model/architecture.h"

namespace petrel {
namespace {

constexpr Architecture kArchitectures[] = {
    {"llama", "LlamaForCausalLM", RopeStyle::kInterleaved, false, &LlamaConfigFromGguf,
     &LlamaConfigFromHf, &BindLlamaWeights, &BuildLlamaGraph},
    {"mistral", "MistralForCausalLM", RopeStyle::kInterleaved, false, &LlamaConfigFromGguf,
     &LlamaConfigFromHf, &BindLlamaWeights, &BuildLlamaGraph},
    // llama.cpp's converter does not permute Qwen2's Q/K rows: its GGUFs rotate half-split pairs.
    {"qwen2", "Qwen2ForCausalLM", RopeStyle::kHalfSplit, true, &LlamaConfigFromGguf,
     &LlamaConfigFromHf, &BindLlamaWeights, &BuildLlamaGraph},
};

}  // namespace

const Architecture* FindArchitectureByGguf(std::string_view name) {
  for (const Architecture& arch : kArchitectures) {
    if (name == arch.gguf_name) return &arch;
  }
  return nullptr;
}

const Architecture* FindArchitectureByHf(std::string_view hf_class, std::string_view model_type) {
  for (const Architecture& arch : kArchitectures) {
    if (hf_class == arch.hf_class || model_type == arch.gguf_name) return &arch;
  }
  return nullptr;
}

std::string KnownArchitectures() {
  std::string names;
  for (const Architecture& arch : kArchitectures) {
    names += names.empty() ? "" : ", ";
    names += arch.gguf_name;
  }
  return names;
}

}  // namespace petrel
