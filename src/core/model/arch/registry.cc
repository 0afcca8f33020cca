// The only list of architectures: each row is a family (defined in arch/<family>.cc) plus the
// names and data of one variant. Llama, Mistral and Qwen2 share one family that differs only
// in data.
#include <span>
#include <string>

#include "core/model/architecture.h"

namespace petrel {

// The families, one per file in arch/ (gemma.cc holds both Gemmas).
extern const ArchitectureFamily kLlamaFamily;
extern const ArchitectureFamily kQwen3Family;
extern const ArchitectureFamily kQwen3MoeFamily;
extern const ArchitectureFamily kPhi3Family;
extern const ArchitectureFamily kGemma2Family;
extern const ArchitectureFamily kGemma3Family;
extern const ArchitectureFamily kBertFamily;
extern const ArchitectureFamily kGptOssFamily;
extern const ArchitectureFamily kDeepSeek2Family;
extern const ArchitectureFamily kOlmo2Family;
extern const ArchitectureFamily kGraniteFamily;
extern const ArchitectureFamily kSmolLm3Family;

namespace {

// Built on first use: the rows copy families defined in other files.
std::span<const Architecture> Architectures() {
  static const Architecture kRows[] = {
      {kLlamaFamily, "llama", "LlamaForCausalLM", RopeStyle::kInterleaved, false},
      {kLlamaFamily, "mistral", "MistralForCausalLM", RopeStyle::kInterleaved, false},
      // Mixtral: Llama with experts. llama.cpp writes its GGUFs as arch `llama` (with
      // `llama.expert_count`), so this row, found by its HF class, converts to that name.
      {kLlamaFamily, "llama", "MixtralForCausalLM", RopeStyle::kInterleaved, false},
      // llama.cpp's converter does not permute Qwen2's Q/K rows: its GGUFs rotate half-split
      // pairs.
      {kLlamaFamily, "qwen2", "Qwen2ForCausalLM", RopeStyle::kHalfSplit, true},
      // The converter permutes the Q/K rows of none of these: all rotate half-split pairs.
      {kQwen3Family, "qwen3", "Qwen3ForCausalLM", RopeStyle::kHalfSplit, false},
      {kQwen3MoeFamily, "qwen3moe", "Qwen3MoeForCausalLM", RopeStyle::kHalfSplit, false},
      {kPhi3Family, "phi3", "Phi3ForCausalLM", RopeStyle::kHalfSplit, false},
      {kGemma2Family, "gemma2", "Gemma2ForCausalLM", RopeStyle::kHalfSplit, false},
      {kGemma3Family, "gemma3", "Gemma3ForCausalLM", RopeStyle::kHalfSplit, false},
      // An encoder: no RoPE, so the style is unused.
      {kBertFamily, "bert", "BertModel", RopeStyle::kHalfSplit, true},
      // NEOX rotation (halves), Q/K rows not permuted; q/k/v/o always have biases.
      {kGptOssFamily, "gpt-oss", "GptOssForCausalLM", RopeStyle::kHalfSplit, true},
      // DeepSeek V3 and V2 are one GGUF arch; their config.json defaults differ (deepseek2.cc).
      // Rows unpermuted, pairs interleaved (HF rope_interleave).
      {kDeepSeek2Family, "deepseek2", "DeepseekV3ForCausalLM", RopeStyle::kInterleaved, false},
      {kDeepSeek2Family, "deepseek2", "DeepseekV2ForCausalLM", RopeStyle::kInterleaved, false},
      // OLMo 2: rows not permuted (NEOX rotation); q/k norms span the whole projections.
      {kOlmo2Family, "olmo2", "Olmo2ForCausalLM", RopeStyle::kHalfSplit, false},
      // Granite 3.x and SmolLM3: the converter permutes Q/K rows as Llama's.
      {kGraniteFamily, "granite", "GraniteForCausalLM", RopeStyle::kInterleaved, false},
      {kSmolLm3Family, "smollm3", "SmolLM3ForCausalLM", RopeStyle::kInterleaved, false},
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
    if (FindArchitectureByGguf(arch.gguf_name) != &arch) continue;  // Mixtral's row is llama
    names += names.empty() ? "" : ", ";
    names += arch.gguf_name;
  }
  return names;
}

}  // namespace petrel
