// Writes one tiny random Llama-family model twice — as a Hugging Face folder (config.json +
// model.safetensors, half-split RoPE layout) and as a GGUF file (Q/K rows permuted to interleaved
// pairs for llama/mistral, as llama.cpp's converter does; unpermuted for qwen2) — so tests can
// check that both sources give the same logits for every architecture variant.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace petrel::testing {

struct TinyModelSpec {
  std::string arch = "llama";   // llama, mistral, qwen2, mixtral (GGUF: llama with experts)
  int dim = 64, n_layers = 2, n_heads = 4, n_kv_heads = 2, ffn = 96, n_vocab = 300;
  bool tied = false;
  bool qkv_bias = false;
  bool llama3_rope = false;      // rope_scaling llama3 (HF) / rope_freqs.weight (GGUF)
  float rope_theta = 10000.0f;
  unsigned seed = 7;
  int n_experts = 4, n_experts_used = 2;  // mixtral only
};

// A tensor as a safetensors file holds it: row-major, shape in PyTorch order ([out, in]).
struct F32Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Writes `tensors` as one F32 safetensors file. Returns "" or an error.
std::string WriteF32Safetensors(const std::string& path,
                                const std::map<std::string, F32Tensor>& tensors);

// Writes `folder`/config.json + model.safetensors and `gguf_path`. Returns "" or an error.
std::string WriteTinyModel(const TinyModelSpec& spec, const std::string& folder,
                           const std::string& gguf_path);

}  // namespace petrel::testing
