// LoadModel: detects the format, reads the config through the architecture registry, and binds
// weight views by name and shape.
#include "core/model/loader.h"

#include <sys/stat.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/format/gguf.h"
#include "core/format/safetensors.h"
#include "core/tokenizer/tokenizer.h"
#include "quant/f16.h"

namespace petrel {

LoadedModel::~LoadedModel() = default;

namespace {

// Converts a small F32/F16/BF16 tensor into an owned f32 copy (norm weights, biases).
Result<TensorView> ConvertToF32(const TensorView& view, LoadedModel& model,
                                const std::string& where) {
  if (view.desc.dtype == DType::kF32) return view;
  const size_t n = size_t(view.desc.n_elems());
  std::vector<float>& buffer = model.owned.emplace_back(n);
  const uint16_t* bits = static_cast<const uint16_t*>(view.data);
  switch (view.desc.dtype) {
    case DType::kF16:
      F16ToF32Row(bits, buffer.data(), n);
      break;
    case DType::kBF16:
      BF16ToF32Row(bits, buffer.data(), n);
      break;
    default:
      return Error("%s: tensor of type %s cannot be used as a norm weight or bias", where.c_str(),
                   DTypeName(view.desc.dtype));
  }
  TensorView out = view;
  out.desc.dtype = DType::kF32;
  out.data = buffer.data();
  return out;
}

class GgufSource final : public WeightSource {
 public:
  GgufSource(LoadedModel& model) : model_(model) {}
  const TensorView* Find(std::string_view gguf_name, std::string_view) override {
    const GgufTensorInfo* info = model_.gguf->FindTensor(gguf_name);
    if (!info) return nullptr;
    return &model_.views.emplace_back(TensorView{info->desc, const_cast<void*>(info->data), 0});
  }
  std::string Describe() const override { return model_.gguf->path(); }
  Result<TensorView> ToF32(const TensorView& view) override {
    return ConvertToF32(view, model_, Describe());
  }

 private:
  LoadedModel& model_;
};

class SafetensorsSource final : public WeightSource {
 public:
  SafetensorsSource(LoadedModel& model) : model_(model) {}
  const TensorView* Find(std::string_view, std::string_view hf_name) override {
    const SafetensorsTensor* tensor = model_.safetensors->Find(hf_name);
    if (!tensor) return nullptr;
    return &model_.views.emplace_back(TensorView{tensor->desc, const_cast<void*>(tensor->data), 0});
  }
  std::string Describe() const override { return model_.source; }
  Result<TensorView> ToF32(const TensorView& view) override {
    return ConvertToF32(view, model_, Describe());
  }

 private:
  LoadedModel& model_;
};

Result<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error("%s: cannot open", path.c_str());
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return Error("%s: not valid JSON", path.c_str());
  if (!json.is_object()) return Error("%s: expected a JSON object", path.c_str());
  return json;
}

void Account(LoadedModel& model) {
  std::map<std::string, size_t> by_type;
  auto add = [&](const TensorView& view) {
    if (!view.data) return;
    by_type[DTypeName(view.desc.dtype)] += view.desc.bytes();
    model.weight_bytes += view.desc.bytes();
    ++model.n_tensors;
  };
  const ModelWeights& w = model.weights;
  add(w.token_embd);
  if (w.output.data != w.token_embd.data) add(w.output);
  add(w.output_norm);
  for (const LayerWeights& L : w.layers) {
    for (const TensorView* view : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.bq, &L.bk, &L.bv,
                                   &L.ffn_norm, &L.w_gate, &L.w_up, &L.w_down}) {
      add(*view);
    }
  }
  model.bytes_by_type.assign(by_type.begin(), by_type.end());
}

// Runs before any allocation sized by the config.
Status CheckConfig(const ModelConfig& config, const std::string& where) {
  const std::string problem = config.Validate();
  if (!problem.empty()) return Error("%s: %s", where.c_str(), problem.c_str());
  return Status::Ok();
}

Status LoadGguf(const std::string& path, const LoadOptions& options, LoadedModel& model) {
  PETREL_ASSIGN_OR_RETURN(model.gguf, GgufFile::Open(path));
  model.format = "gguf";
  model.mapped_bytes = model.gguf->file_bytes();
  PETREL_ASSIGN_OR_RETURN(std::string_view arch_name,
                          model.gguf->GetString("general.architecture"));
  model.arch = FindArchitectureByGguf(arch_name);
  if (!model.arch) {
    return Error("%s: architecture '%.*s' is not supported (supported: %s)", path.c_str(),
                 int(arch_name.size()), arch_name.data(), KnownArchitectures().c_str());
  }
  auto config = model.arch->config_from_gguf(*model.gguf, *model.arch);
  if (!config.ok()) return config.status().Wrap(path);
  model.config = std::move(config).value();
  PETREL_RETURN_IF_ERROR(CheckConfig(model.config, path));
  if (options.load_tokenizer) {
    auto tokenizer = Tokenizer::FromGguf(*model.gguf);
    if (!tokenizer.ok()) return tokenizer.status().Wrap(path);
    model.tokenizer = std::move(tokenizer).value();
  }
  GgufSource source(model);
  return model.arch->bind_weights(model.config, source, &model.weights);
}

Status LoadHfFolder(const std::string& folder, const LoadOptions& options, LoadedModel& model) {
  PETREL_ASSIGN_OR_RETURN(nlohmann::json config, ReadJsonFile(folder + "/config.json"));
  std::string hf_class;
  if (auto it = config.find("architectures");
      it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    hf_class = (*it)[0].get<std::string>();
  }
  std::string model_type = config.value("model_type", std::string());
  model.arch = FindArchitectureByHf(hf_class, model_type);
  if (!model.arch) {
    return Error("%s/config.json: architecture '%s' is not supported (supported: %s)",
                 folder.c_str(), hf_class.c_str(), KnownArchitectures().c_str());
  }
  auto parsed = model.arch->config_from_hf(config, *model.arch);
  if (!parsed.ok()) return parsed.status().Wrap(folder);
  model.config = std::move(parsed).value();
  PETREL_RETURN_IF_ERROR(CheckConfig(model.config, folder));
  PETREL_ASSIGN_OR_RETURN(model.safetensors, SafetensorsSet::OpenFolder(folder));
  model.format = "safetensors";
  model.mapped_bytes = model.safetensors->total_bytes();
  if (options.load_tokenizer) {
    auto tokenizer = Tokenizer::FromHfFolder(folder);
    if (!tokenizer.ok()) return tokenizer.status().Wrap(folder);
    model.tokenizer = std::move(tokenizer).value();
  }
  SafetensorsSource source(model);
  return model.arch->bind_weights(model.config, source, &model.weights);
}

}  // namespace

Result<std::unique_ptr<LoadedModel>> LoadModel(const std::string& path,
                                               const LoadOptions& options) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return Error("%s: no such file or folder", path.c_str());
  auto model = std::make_unique<LoadedModel>();
  model->source = path;
  if (S_ISDIR(info.st_mode)) {
    PETREL_RETURN_IF_ERROR(LoadHfFolder(path, options, *model));
  } else {
    PETREL_RETURN_IF_ERROR(LoadGguf(path, options, *model));
  }
  if (model->tokenizer && model->tokenizer->n_vocab() > size_t(model->config.n_vocab)) {
    return Error("%s: tokenizer has %zu tokens but the model only %lld", path.c_str(),
                 model->tokenizer->n_vocab(), (long long)model->config.n_vocab);
  }
  model->weights.rope_inv_freq = model->config.rope.InverseFrequencies();
  Account(*model);
  return model;
}

Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return Error("%s: no such file or folder", path.c_str());
  if (S_ISDIR(info.st_mode)) return Tokenizer::FromHfFolder(path);
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  auto tokenizer = Tokenizer::FromGguf(*file);
  if (!tokenizer.ok()) return tokenizer.status().Wrap(path);
  return tokenizer;
}

}  // namespace petrel
