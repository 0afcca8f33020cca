// QuantizeHfFolder: LoadModel() gives the config and weight views; this writes them as GGUF.
#include "core/convert/quantize_hf.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/format/atomic_file.h"
#include "core/format/gguf_writer.h"
#include "core/model/loader.h"
#include "quant/quantize.h"

namespace petrel {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Source row of output row `r` when converting HF's half-split RoPE rows (per head [2][d/2]) to
// llama.cpp's interleaved pairs ([d/2][2]); identity when no permutation is wanted.
int64_t SourceRow(int64_t r, int64_t head_dim, bool permute) {
  if (!permute) return r;
  const int64_t head = r / head_dim, within = r % head_dim, half = head_dim / 2;
  return head * head_dim + (within % 2) * half + within / 2;
}

}  // namespace

Status QuantizeHfFolder(const std::string& folder, const std::string& out_path, const QuantMix& mix,
                        bool verbose, const GgufWriter::ProgressFn& progress) {
  PETREL_RETURN_IF_ERROR(CheckOutputIsNotInput(out_path, {folder}));
  LoadOptions options;
  options.load_tokenizer = true;  // proves the tokenizer loads before anything is written
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> model, LoadModel(folder, options));
  if (model->format != "safetensors") return Error("%s: not a Hugging Face folder", folder.c_str());
  const ModelConfig& c = model->config;
  GgufWriter writer;
  writer.SetString("general.architecture", c.architecture);
  writer.SetString("general.name", folder.substr(folder.find_last_of('/') + 1));
  writer.SetU32("general.file_type", GgufFileType(mix));
  writer.SetU32("general.quantization_version", 2);
  model->arch->config_to_gguf(c, *model->arch, &writer);
  // Tokenizer: the tokenizer.json itself, plus the two files it is read with.
  const std::string tokenizer_json = ReadText(folder + "/tokenizer.json");
  if (tokenizer_json.empty()) return Error("%s/tokenizer.json: missing or empty", folder.c_str());
  writer.SetString("tokenizer.huggingface.json", tokenizer_json);
  const std::string tokenizer_config = ReadText(folder + "/tokenizer_config.json");
  if (!tokenizer_config.empty()) {
    writer.SetString("tokenizer.huggingface.config", tokenizer_config);
    auto config = nlohmann::json::parse(tokenizer_config, nullptr, false);
    if (config.is_object() && config.contains("chat_template") && config["chat_template"].is_string()) {
      writer.SetString("tokenizer.chat_template", config["chat_template"].get<std::string>());
    }
  }
  const std::string generation_config = ReadText(folder + "/generation_config.json");
  if (!generation_config.empty()) writer.SetString("tokenizer.huggingface.generation_config", generation_config);

  // Weights, as the architecture lists them. Rows that follow the RoPE pair layout (Q, K and
  // their biases) are permuted when this family's GGUF files rotate interleaved pairs.
  const bool permute = model->arch->gguf_rope_style == RopeStyle::kInterleaved &&
                       c.rope.style == RopeStyle::kHalfSplit;
  QuantModelInfo model_info;
  model_info.n_layers = int(c.n_layers);
  model_info.n_gqa = c.n_kv_heads > 0 ? int(c.n_heads / c.n_kv_heads) : 1;
  model_info.n_experts = int(c.n_experts);
  model_info.has_output = !c.tied_embeddings;
  FallbackReport fallbacks;
  size_t n_tensors = 0;
  Status unwritable;  // the first tensor whose type cannot be written (no importance matrix here)
  auto add = [&](const WeightSpec& spec, int layer, const TensorView& view) {
    if (!view.data || !unwritable.ok()) return;
    const std::string name = GgufWeightName(spec, layer);
    const bool permute_rows = permute && spec.rope_rows;
    TensorDesc desc = view.desc;
    const DType wanted = MixedTensorType(mix, name, desc.n_dims, model_info, desc.ne[0]);
    desc.dtype = FallbackForRow(wanted, desc.ne[0]);
    fallbacks.Note(name, wanted, desc.dtype, desc.ne[0]);
    ++n_tensors;
    unwritable = CheckCanWrite(desc.dtype, name, /*has_importance=*/false);
    if (!unwritable.ok()) return;
    if (verbose) std::fprintf(stderr, "%-32s %-6s -> %s\n", name.c_str(), DTypeName(view.desc.dtype), DTypeName(desc.dtype));
    const TensorDesc src = view.desc;
    const char* src_data = static_cast<const char*>(view.data);
    const int64_t head_dim = c.head_dim;
    writer.AddTensor(name, desc, [=](void* dst) {
      const size_t n = size_t(src.ne[0]);
      std::vector<float> row(n);
      for (int64_t r = 0; r < src.n_rows(); ++r) {
        const int64_t from = src.n_dims == 1 ? r : SourceRow(r, head_dim, permute_rows);
        DequantizeRow(src.dtype, src_data + size_t(from) * src.row_bytes(), row.data(), n);
        if (src.n_dims == 1 && permute_rows) {
          // A bias vector: permute its elements the same way as the rows.
          std::vector<float> permuted(n);
          for (size_t i = 0; i < n; ++i) permuted[i] = row[size_t(SourceRow(int64_t(i), head_dim, true))];
          row.swap(permuted);
        }
        QuantizeRow(desc.dtype, row.data(), static_cast<char*>(dst) + size_t(r) * desc.row_bytes(), n);
      }
    });
  };
  const Architecture& arch = *model->arch;
  const ModelWeights& w = model->weights;
  add(arch.token_embd, -1, w.token_embd);
  add(arch.output_norm, -1, w.output_norm);
  if (!c.tied_embeddings) add(arch.output, -1, w.output);
  for (size_t i = 0; i < w.input.size(); ++i) add(w.input.spec(i), -1, w.input[i]);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& layer = w.layers[l];
    for (size_t i = 0; i < layer.size(); ++i) {
      // A fused tensor's parts are written as the fused tensor.
      if (!layer.spec(i).IsFusedPart()) add(layer.spec(i), int(l), layer[i]);
    }
  }
  if (c.rope.scaling == RopeScalingKind::kLlama3) {
    // llama.cpp's form of Llama 3 scaling: per-pair divisors of the base frequencies.
    RopeConfig plain = c.rope;
    plain.scaling = RopeScalingKind::kNone;
    const std::vector<double> base = plain.InverseFrequencies(), scaled = c.rope.InverseFrequencies();
    auto factors = std::make_shared<std::vector<float>>();
    for (size_t i = 0; i < base.size(); ++i) factors->push_back(float(base[i] / scaled[i]));
    writer.AddTensor("rope_freqs.weight", TensorDesc::Make(DType::kF32, {int64_t(factors->size())}),
                     [factors](void* dst) { std::memcpy(dst, factors->data(), factors->size() * sizeof(float)); });
  }
  if (c.rope.scaling == RopeScalingKind::kLongRope) {
    // llama.cpp's form of LongRoPE: the two divisor tables as tensors.
    for (const auto& [name, table] :
         {std::pair{"rope_factors_long.weight", &c.rope.long_factors},
          std::pair{"rope_factors_short.weight", &c.rope.short_factors}}) {
      auto factors = std::make_shared<std::vector<float>>(*table);
      writer.AddTensor(name, TensorDesc::Make(DType::kF32, {int64_t(factors->size())}),
                       [factors](void* dst) {
                         std::memcpy(dst, factors->data(), factors->size() * sizeof(float));
                       });
    }
  }
  PETREL_RETURN_IF_ERROR(unwritable);
  fallbacks.Finish(n_tensors);
  writer.SetProgress(progress);
  return writer.Write(out_path);
}

}  // namespace petrel
