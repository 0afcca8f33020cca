// Loading a model from a GGUF file or a Hugging Face folder: config, weight views into the
// mapped files (converted copies only for tiny norm/bias vectors), tokenizer.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/format/mapped_file.h"
#include "core/model/architecture.h"
#include "core/model/lora_adapter.h"
#include "core/model/model_config.h"

namespace petrel {

class GgufFile;
class SafetensorsSet;
class Tokenizer;

struct LoadOptions {
  bool load_tokenizer = true;
  MapOptions map;  // how the weight files are brought in (mapped or read, locked, progress)
  std::vector<LoraFile> lora;  // adapters applied at run time (`LoadedModel::lora`)
  // A pre-quantized Hugging Face checkpoint (GPTQ/AWQ) is dequantized to f32 throughout instead
  // of repacked exactly into Q4_0/Q5_0 where its groups allow (hf_quant.h): 4x the memory of
  // Q4_0, but f32 activations, so the logits match the checkpoint's f32 dequantization.
  bool prequantized_as_f32 = false;
  // Changes the config read from the file before it is validated and anything is sized from
  // it: for experiments and tests that run a model with one variant changed (an ablation).
  std::function<void(ModelConfig&)> edit_config;
};

struct LoadedModel {
  ModelConfig config;
  const Architecture* arch = nullptr;
  ModelWeights weights;           // host views: into the mapped files or `owned_`
  std::unique_ptr<Tokenizer> tokenizer;
  std::string source;             // path as given
  std::string format;             // "gguf" or "safetensors"
  size_t mapped_bytes = 0;        // size of the mapped weight files
  size_t weight_bytes = 0;        // bytes of the tensors the model uses
  size_t n_tensors = 0;
  std::vector<std::pair<std::string, size_t>> bytes_by_type;  // dtype name -> bytes
  // A pre-quantized Hugging Face checkpoint: its quantization and what loading made of it
  // ("gptq 4-bit, group 128: 14 matrices repacked exactly into Q4_0/Q5_0 (1.2 MiB)"), and the
  // bytes of the weights it unpacked into owned memory. Empty and 0 otherwise.
  std::string prequantized;
  size_t prequantized_bytes = 0;
  // The LoRA adapters of LoadOptions::lora, checked against the weights; null when none. The
  // graph gets their nodes through `LoraSet::AddToGraph`; the weights stay as mapped.
  std::unique_ptr<LoraSet> lora;

  ~LoadedModel();
  // Keep-alive for the mappings and converted tensors the views point into.
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<SafetensorsSet> safetensors;
  std::deque<std::vector<float>> owned;
  std::deque<TensorView> views;
};

// `path` is a .gguf file or a folder with config.json + safetensors (+ tokenizer.json).
Result<std::unique_ptr<LoadedModel>> LoadModel(const std::string& path, const LoadOptions& options = {});

// LongRoPE chooses its factor table by the context the model runs with (model_config.h):
// selects it for sequences of up to `context` tokens and recomputes the rotation frequencies.
// Nothing to do for other scalings. Before any graph points at `weights.rope_inv_freq`.
void UseRopeContext(int64_t context, LoadedModel* model);

// Only the tokenizer of a model (vocabulary-only GGUF files work too).
Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path);

}  // namespace petrel
