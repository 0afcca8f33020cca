// Reading LoRA adapters (llama.cpp's GGUF layout, PEFT folders) and resolving each pair of
// low-rank matrices against the model's weight table.
#include "core/model/lora_adapter.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/format/gguf.h"
#include "core/format/safetensors.h"
#include "core/model/architecture.h"
#include "quant/quantize.h"  // DequantizeRow

namespace petrel {

namespace {

bool IsAdapterName(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

// "dir/style.gguf" -> "style", "peft/folder/" -> "folder".
std::string FileStem(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  if (slash != std::string_view::npos) path.remove_prefix(slash + 1);
  const size_t dot = path.rfind('.');
  if (dot != std::string_view::npos && dot > 0) path = path.substr(0, dot);
  return std::string(path);
}

}  // namespace

Result<LoraFile> ParseLoraArgument(std::string_view text) {
  LoraFile file;
  const size_t equals = text.find('=');
  struct stat info;
  if (equals != std::string_view::npos && IsAdapterName(text.substr(0, equals)) &&
      stat(std::string(text).c_str(), &info) != 0) {
    file.name = std::string(text.substr(0, equals));
    text.remove_prefix(equals + 1);
  }
  file.path = std::string(text);
  const size_t colon = text.rfind(':');
  if (colon != std::string_view::npos) {
    const std::string_view suffix = text.substr(colon + 1);
    float scale = 0.0f;
    const auto [end, error] = std::from_chars(suffix.data(), suffix.data() + suffix.size(), scale);
    if (error == std::errc() && end == suffix.data() + suffix.size() && !suffix.empty()) {
      if (!std::isfinite(scale)) {
        return Error("--lora %.*s: scale must be a finite number", int(text.size()), text.data());
      }
      file.path = std::string(text.substr(0, colon));
      file.scale = scale;
    }
  }
  if (file.path.empty()) return Error("--lora needs a file: [NAME=]FILE[:SCALE]");
  if (file.name.empty()) file.name = FileStem(file.path);
  return file;
}

// Builds a LoraSet: the model's weight names, and each adapter's pairs checked and converted.
class LoraSetBuilder {
 public:
  LoraSetBuilder(const Architecture& arch, const ModelConfig& config, const ModelWeights& weights)
      : arch_(arch), config_(config), weights_(weights), set_(std::make_unique<LoraSet>()) {
    const int n_layers = int(config.n_layers);
    for (int l = 0; l < n_layers; ++l) {
      const LayerWeights& layer = weights.layers[size_t(l)];
      for (size_t i = 0; i < layer.size(); ++i) {
        const WeightSpec& spec = layer.spec(i);
        if (spec.IsFusedPart()) continue;  // adapters target the stored (fused) tensor
        const Target target{l, i, &spec, &layer[i]};
        by_name_[GgufWeightName(spec, l)] = target;
        by_name_[HfWeightName(arch, spec, l)] = target;
      }
    }
    const Target output{n_layers, 0, &arch.output, &weights.output};
    by_name_[GgufWeightName(arch.output, -1)] = output;
    by_name_[HfWeightName(arch, arch.output, -1)] = output;
    const Target embedding{-1, 0, &arch.token_embd, &weights.token_embd};
    by_name_[GgufWeightName(arch.token_embd, -1)] = embedding;
    by_name_[HfWeightName(arch, arch.token_embd, -1)] = embedding;
  }

  // One pair of an adapter, as read: the target's name in the adapter's naming and A, B as
  // stored (GGUF order: A [n_in, rank], B [rank, n_out]).
  struct Pair {
    std::string target;
    TensorView a, b;
  };
  // How an adapter scales and lays out its pairs.
  struct Adapter {
    std::string where;  // for messages
    float user_scale = 1.0f;                   // applied by the graph (LoraApplication)
    double alpha = 0.0;                        // 0: no alpha (GGUF), the factor is 1
    int64_t rank = 0;                          // the declared rank (PEFT's r); 0: each pair's own
    bool rslora = false;                       // alpha / sqrt(rank) instead of alpha / rank
    RopeStyle rows = RopeStyle::kInterleaved;  // the layout of the Q/K rows of B
  };

  Status Add(const Adapter& adapter, const std::vector<Pair>& pairs) {
    for (const Pair& pair : pairs) PETREL_RETURN_IF_ERROR(AddPair(adapter, pair));
    return Status::Ok();
  }

  // Pairs added from now on belong to the adapter given `scale` as loaded.
  void StartAdapter(float scale) {
    adapter_index_ = int(set_->default_scales_.size());
    set_->default_scales_.push_back(scale);
  }

  std::unique_ptr<LoraSet> Finish() { return std::move(set_); }

 private:
  struct Target {
    int layer = 0;  // -1: the embedding, n_layers: the output head
    size_t index = 0;
    const WeightSpec* spec = nullptr;
    const TensorView* view = nullptr;
  };

  Status AddPair(const Adapter& adapter, const Pair& pair) {
    const char* where = adapter.where.c_str();
    const char* name = pair.target.c_str();
    auto found = by_name_.find(pair.target);
    if (found == by_name_.end() || !found->second.view->data) {
      return Error("%s: tensor %s does not exist in the model (an adapter for another model?)",
                   where, name);
    }
    const Target& target = found->second;
    if (target.layer < 0) {
      return Error("%s: tensor %s: LoRA on the token embeddings is not supported", where, name);
    }
    if (target.spec->kind != WeightKind::kMatrix) {
      return Error("%s: tensor %s: LoRA is supported on matrices only, not on %s", where, name,
                   target.spec->kind == WeightKind::kExperts ? "expert tensors"
                   : target.spec->kind == WeightKind::kHeads ? "per-head tensors"
                                                             : "vectors");
    }
    const bool is_output = target.layer == int(config_.n_layers);
    if (is_output && weights_.output.data == weights_.token_embd.data) {
      return Error("%s: tensor %s: LoRA on an output head tied to the embeddings is not supported",
                   where, name);
    }
    const TensorDesc& base = target.view->desc;
    const TensorDesc& a = pair.a.desc;
    const TensorDesc& b = pair.b.desc;
    if (a.n_dims != 2 || b.n_dims != 2 || a.ne[1] != b.ne[0]) {
      return Error("%s: tensor %s: lora A %s and B %s do not share a rank", where, name,
                   a.ShapeString().c_str(), b.ShapeString().c_str());
    }
    const int64_t rank = a.ne[1];
    if (a.ne[0] != base.ne[0] || b.ne[1] != base.ne[1]) {
      return Error(
          "%s: tensor %s: lora A %s and B %s do not fit the model's %s (an adapter for "
          "another model?)",
          where, name, a.ShapeString().c_str(), b.ShapeString().c_str(),
          base.ShapeString().c_str());
    }
    if (rank <= 0 || rank > base.ne[0]) {
      return Error("%s: tensor %s: rank %lld is invalid", where, name, (long long)rank);
    }
    if (adapter.rank > 0 && rank != adapter.rank) {
      return Error("%s: tensor %s has rank %lld but the adapter declares r = %lld", where, name,
                   (long long)rank, (long long)adapter.rank);
    }
    double factor = 1.0;
    if (adapter.alpha > 0.0) {
      factor *= adapter.alpha / (adapter.rslora ? std::sqrt(double(rank)) : double(rank));
    }
    PETREL_ASSIGN_OR_RETURN(TensorView a_f32, ToF32(pair.a, 1.0, where, name));
    PETREL_ASSIGN_OR_RETURN(TensorView b_f32, ToF32(pair.b, factor, where, name));
    if (target.spec->rope_rows && adapter.rows != config_.rope.style) {
      PermuteHeadRows(adapter.rows, b_f32);
    }
    const std::string stored = GgufWeightName(*target.spec, is_output ? -1 : target.layer);
    const LoraDelta delta{a_f32, b_f32, adapter_index_};
    set_->merges_.push_back(LoraMerge{stored, 0, delta, adapter.user_scale});

    // The graph reads a fused tensor through its parts: each part gets its rows of B.
    bool fused = false;
    if (!is_output) {
      const LayerWeights& layer = weights_.layers[size_t(target.layer)];
      for (size_t j = 0; j < layer.size(); ++j) {
        const WeightSpec& part = layer.spec(j);
        if (part.fused_in != int(target.index) || !layer[j].data) continue;
        if (target.spec->rope_rows || part.rope_rows) {
          if (adapter.rows != config_.rope.style) {
            return Error("%s: tensor %s: fused rows in another RoPE layout are not supported",
                         where, name);
          }
        }
        fused = true;
        const int64_t first = part.first_row(config_);
        TensorView rows = b_f32;
        rows.desc.ne[1] = layer[j].desc.ne[1];
        rows.data = b_f32.as<float>() + first * rank;
        set_->deltas_[{target.layer, j}].push_back(LoraDelta{a_f32, rows, adapter_index_});
      }
    }
    if (!fused) set_->deltas_[{target.layer, target.index}].push_back(delta);
    return Status::Ok();
  }

  // An owned f32 copy of `view` times `factor`.
  Result<TensorView> ToF32(const TensorView& view, double factor, const char* where,
                           const char* name) {
    if (!CanDequantize(view.desc.dtype)) {
      return Error("%s: tensor %s: type %s cannot be read", where, name,
                   DTypeName(view.desc.dtype));
    }
    const size_t n_in = size_t(view.desc.ne[0]);
    const size_t n_rows = size_t(view.desc.n_rows());
    std::vector<float>& buffer = set_->owned_.emplace_back(n_in * n_rows);
    for (size_t r = 0; r < n_rows; ++r) {
      DequantizeRow(view.desc.dtype,
                    static_cast<const char*>(view.data) + r * view.desc.row_bytes(),
                    buffer.data() + r * n_in, n_in);
    }
    if (factor != 1.0) {
      for (float& value : buffer) value = float(double(value) * factor);
    }
    return TensorView{TensorDesc::Make(DType::kF32, {view.desc.ne[0], view.desc.ne[1]}),
                      buffer.data(), 0};
  }

  // Reorders B's rows (output features: the heads' rotated dimensions) from the adapter's RoPE
  // layout to the model's, as the converters do for the base Q and K matrices.
  void PermuteHeadRows(RopeStyle from, TensorView& b) {
    const int64_t rank = b.desc.ne[0], n_out = b.desc.ne[1];
    const int64_t head_dim = config_.head_dim, half = head_dim / 2;
    const float* src = b.as<const float>();
    std::vector<float>& out = set_->owned_.emplace_back(size_t(rank * n_out));
    for (int64_t r = 0; r < n_out; ++r) {
      // Row `r` of a half-split head is row `interleaved` of the interleaved layout.
      const int64_t head = r / head_dim, within = r % head_dim;
      const int64_t interleaved =
          head * head_dim + (within < half ? 2 * within : 2 * (within - half) + 1);
      const int64_t to = from == RopeStyle::kHalfSplit ? interleaved : r;
      const int64_t at = from == RopeStyle::kHalfSplit ? r : interleaved;
      std::memcpy(&out[size_t(to * rank)], src + at * rank, size_t(rank) * sizeof(float));
    }
    b.data = out.data();
  }

  const Architecture& arch_;
  const ModelConfig& config_;
  const ModelWeights& weights_;
  std::unique_ptr<LoraSet> set_;
  std::unordered_map<std::string, Target> by_name_;
  int adapter_index_ = 0;  // the adapter whose pairs are being added
};

namespace {

using Pair = LoraSetBuilder::Pair;
using Adapter = LoraSetBuilder::Adapter;

// Splits `name` into the target and which matrix it is, by its suffix; false when it has
// neither suffix.
bool SplitPairName(std::string_view name, std::string_view suffix_a, std::string_view suffix_b,
                   std::string* target, bool* is_a) {
  for (const auto& [suffix, a] : {std::pair{suffix_a, true}, std::pair{suffix_b, false}}) {
    if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) {
      *target = std::string(name.substr(0, name.size() - suffix.size()));
      *is_a = a;
      return true;
    }
  }
  return false;
}

// Pairs up the A and B tensors by target; a half pair is an error.
Result<std::vector<Pair>> MatchPairs(const std::string& where,
                                     const std::map<std::string, Pair>& by_target) {
  std::vector<Pair> pairs;
  for (const auto& [target, pair] : by_target) {
    if (!pair.a.data || !pair.b.data) {
      return Error("%s: tensor %s has lora %s but not lora %s", where.c_str(), target.c_str(),
                   pair.a.data ? "A" : "B", pair.a.data ? "B" : "A");
    }
    pairs.push_back(pair);
  }
  if (pairs.empty()) return Error("%s: the adapter has no LoRA tensors", where.c_str());
  return pairs;
}

// llama.cpp's layout: general.type "adapter", adapter.type "lora", adapter.lora.alpha, and
// tensors "<base tensor>.lora_a" [n_in, rank] / ".lora_b" [rank, n_out].
Status ReadGgufAdapter(const LoraFile& file, const Architecture& arch, LoraSetBuilder* builder) {
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(file.path));
  const char* where = file.path.c_str();
  PETREL_ASSIGN_OR_RETURN(std::string_view type, gguf->GetStringOr("general.type", ""));
  if (type != "adapter") {
    return Error("%s: not a LoRA adapter (general.type is '%.*s', expected 'adapter')", where,
                 int(type.size()), type.data());
  }
  PETREL_ASSIGN_OR_RETURN(std::string_view adapter_type, gguf->GetStringOr("adapter.type", ""));
  if (adapter_type != "lora") {
    return Error("%s: adapter.type is '%.*s', expected 'lora'", where, int(adapter_type.size()),
                 adapter_type.data());
  }
  PETREL_ASSIGN_OR_RETURN(std::string_view adapter_arch, gguf->GetString("general.architecture"));
  if (adapter_arch != arch.gguf_name) {
    return Error("%s: adapter for architecture '%.*s', the model is '%s'", where,
                 int(adapter_arch.size()), adapter_arch.data(), arch.gguf_name);
  }
  Adapter adapter;
  adapter.where = file.path;
  adapter.user_scale = file.scale;
  auto alpha = gguf->GetFloatOr("adapter.lora.alpha", 0.0);
  if (!alpha.ok()) return alpha.status().Wrap(file.path);
  // As llama.cpp: 0 (or absent) means no alpha, the update is B·A as stored.
  if (!std::isfinite(*alpha) || *alpha < 0.0) {
    return Error("%s: adapter.lora.alpha %g is invalid (must be positive)", where, *alpha);
  }
  adapter.alpha = *alpha;
  adapter.rows = arch.gguf_rope_style;
  std::map<std::string, Pair> by_target;
  for (const GgufTensorInfo& info : gguf->tensors()) {
    std::string target;
    bool is_a = false;
    if (!SplitPairName(info.name, ".lora_a", ".lora_b", &target, &is_a)) {
      return Error("%s: tensor %s is not a LoRA tensor (.lora_a or .lora_b)", where,
                   info.name.c_str());
    }
    Pair& pair = by_target[target];
    pair.target = target;
    (is_a ? pair.a : pair.b) = TensorView{info.desc, const_cast<void*>(info.data), 0};
  }
  PETREL_ASSIGN_OR_RETURN(std::vector<Pair> pairs, MatchPairs(file.path, by_target));
  return builder->Add(adapter, pairs);  // copies the tensors before `gguf` is closed
}

Result<nlohmann::json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error("%s: cannot open", path.c_str());
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return Error("%s: not a JSON object", path.c_str());
  }
  return json;
}

// A PEFT folder: adapter_config.json (r, lora_alpha, use_rslora) and adapter_model.safetensors
// with "base_model.model.<HF weight name minus .weight>.lora_A.weight" / ".lora_B.weight".
Status ReadPeftFolder(const LoraFile& file, LoraSetBuilder* builder) {
  const std::string config_path = file.path + "/adapter_config.json";
  PETREL_ASSIGN_OR_RETURN(nlohmann::json config, ReadJson(config_path));
  const char* where = config_path.c_str();
  if (auto peft_type = config.find("peft_type");
      peft_type != config.end() && !(peft_type->is_string() && *peft_type == "LORA")) {
    return Error("%s: peft_type %s is not LORA", where, peft_type->dump().c_str());
  }
  Adapter adapter;
  adapter.where = file.path;
  adapter.user_scale = file.scale;
  adapter.rows = RopeStyle::kHalfSplit;  // Hugging Face checkpoints rotate half-split heads
  const auto r = config.find("r");
  if (r == config.end() || !r->is_number_integer() || r->get<int64_t>() <= 0) {
    return Error("%s: r (the rank) must be a positive integer, got %s", where,
                 r == config.end() ? "nothing" : r->dump().c_str());
  }
  adapter.rank = r->get<int64_t>();
  adapter.alpha = 8.0;  // PEFT's default lora_alpha
  if (auto alpha = config.find("lora_alpha"); alpha != config.end()) {
    if (!alpha->is_number() || !(alpha->get<double>() > 0.0) ||
        !std::isfinite(alpha->get<double>())) {
      return Error("%s: lora_alpha must be a positive number, got %s", where,
                   alpha->dump().c_str());
    }
    adapter.alpha = alpha->get<double>();
  }
  if (auto rslora = config.find("use_rslora"); rslora != config.end() && !rslora->is_null()) {
    if (!rslora->is_boolean()) return Error("%s: use_rslora must be true or false", where);
    adapter.rslora = rslora->get<bool>();
  }
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    if (auto pattern = config.find(key);
        pattern != config.end() && !pattern->is_null() && !pattern->empty()) {
      return Error("%s: per-module %s is not supported", where, key);
    }
  }
  if (auto dora = config.find("use_dora");
      dora != config.end() && dora->is_boolean() && dora->get<bool>()) {
    return Error("%s: DoRA adapters (use_dora) are not supported", where);
  }
  const std::string weights_path = file.path + "/adapter_model.safetensors";
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> tensors,
                          SafetensorsFile::Open(weights_path));
  constexpr std::string_view kPrefix = "base_model.model.";
  std::map<std::string, Pair> by_target;
  for (const SafetensorsTensor& tensor : tensors->tensors()) {
    std::string_view name = tensor.name;
    std::string target;
    bool is_a = false;
    if (name.substr(0, kPrefix.size()) != kPrefix ||
        !SplitPairName(name.substr(kPrefix.size()), ".lora_A.weight", ".lora_B.weight", &target,
                       &is_a)) {
      return Error("%s: tensor %s is not a LoRA tensor (%s….lora_A.weight or .lora_B.weight)",
                   weights_path.c_str(), tensor.name.c_str(), std::string(kPrefix).c_str());
    }
    target += ".weight";
    Pair& pair = by_target[target];
    pair.target = target;
    (is_a ? pair.a : pair.b) = TensorView{tensor.desc, const_cast<void*>(tensor.data), 0};
  }
  PETREL_ASSIGN_OR_RETURN(std::vector<Pair> pairs, MatchPairs(weights_path, by_target));
  return builder->Add(adapter, pairs);
}

}  // namespace

Result<std::unique_ptr<LoraSet>> LoadLoraAdapters(const Architecture& arch,
                                                  const ModelConfig& config,
                                                  const ModelWeights& weights,
                                                  std::span<const LoraFile> files) {
  LoraSetBuilder builder(arch, config, weights);
  for (const LoraFile& file : files) {
    builder.StartAdapter(file.scale);
    struct stat info;
    if (stat(file.path.c_str(), &info) != 0) {
      return Error("%s: no such LoRA adapter file or folder", file.path.c_str());
    }
    if (S_ISDIR(info.st_mode)) {
      PETREL_RETURN_IF_ERROR(ReadPeftFolder(file, &builder));
    } else {
      PETREL_RETURN_IF_ERROR(ReadGgufAdapter(file, arch, &builder));
    }
  }
  return builder.Finish();
}

}  // namespace petrel
