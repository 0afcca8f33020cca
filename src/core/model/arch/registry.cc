// The only list of architectures: each row is a family (defined in arch/<family>.cc) plus the
// names and data of one variant. Llama, Mistral and Qwen2 share one family that differs only
// in data.
#include <span>
#include <string>

#include "core/model/architecture.h"

namespace petrel {

// The families, one per file in arch/.
extern const ArchitectureFamily kLlamaFamily;

namespace {

// Built on first use: the rows copy families defined in other files.
std::span<const Architecture> Architectures() {
  static const Architecture kRows[] = {
      {kLlamaFamily, "llama", "LlamaForCausalLM", RopeStyle::kInterleaved, false},
      {kLlamaFamily, "mistral", "MistralForCausalLM", RopeStyle::kInterleaved, false},
      // llama.cpp's converter does not permute Qwen2's Q/K rows: its GGUFs rotate half-split
      // pairs.
      {kLlamaFamily, "qwen2", "Qwen2ForCausalLM", RopeStyle::kHalfSplit, true},
  };
  return kRows;
}

}  // namespace

const Architecture* FindArchitectureByGguf(std::string_view name) {
  for (const Architecture& arch : Architectures()) {
    if (name == arch.gguf_name) return &arch;
  }
  return nullptr;
}

const Architecture* FindArchitectureByHf(std::string_view hf_class, std::string_view model_type) {
  for (const Architecture& arch : Architectures()) {
    if (hf_class == arch.hf_class || model_type == arch.gguf_name) return &arch;
  }
  return nullptr;
}

std::string KnownArchitectures() {
  std::string names;
  for (const Architecture& arch : Architectures()) {
    names += names.empty() ? "" : ", ";
    names += arch.gguf_name;
  }
  return names;
}

}  // namespace petrel
