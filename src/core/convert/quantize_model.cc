// QuantizeGgufModel: stream every tensor of a GGUF through f32 rows into its new type.
#include "core/convert/quantize_model.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "core/eval/imatrix_file.h"
#include "core/format/atomic_file.h"
#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/model/loader.h"
#include "quant/quantize.h"
#include "quant/quantize_weighted.h"

namespace petrel {
namespace {

// Every imatrix entry must be a matrix of this model with the same number of columns (and of
// stacked matrices): names or shapes that differ mean it was collected on another model.
Status CheckImatrixMatchesModel(const Imatrix& imatrix, const std::string& imatrix_path,
                                const GgufFile& model, const std::string& model_path) {
  for (const auto& [name, entry] : imatrix.entries) {
    const GgufTensorInfo* info = model.FindTensor(name);
    const std::string shown = EscapeForMessage(name);
    if (!info || info->desc.n_dims < 2) {
      return Error("%s has an entry for '%s', which is not a matrix of %s: the importance "
                   "matrix was made for another model",
                   imatrix_path.c_str(), shown.c_str(), model_path.c_str());
    }
    const int64_t n_mat = info->desc.ne[2] * info->desc.ne[3];
    if (entry.n_in != info->desc.ne[0] || int64_t(entry.n_mat()) != n_mat) {
      return Error("%s: entry '%s' has %lld columns x %zu matrices, but the tensor in %s has "
                   "%lld x %lld: the importance matrix was made for another model",
                   imatrix_path.c_str(), shown.c_str(), static_cast<long long>(entry.n_in),
                   entry.n_mat(), model_path.c_str(),
                   static_cast<long long>(info->desc.ne[0]), static_cast<long long>(n_mat));
    }
  }
  return Status::Ok();
}

// A count that is one number, or one per layer (the first layer's is used, as llama.cpp's
// `n_gqa()` does); `fallback` where the key is absent.
Result<uint64_t> ReadCount(const GgufFile& file, const std::string& key, uint64_t fallback) {
  const GgufValue* value = file.Find(key);
  if (value && value->type == GgufType::kArray && value->count > 0 &&
      value->elem_type != GgufType::kString) {
    const int64_t first = value->IntAt(0);
    if (first < 0) return Error("%s: %s[0] is negative", file.path().c_str(), key.c_str());
    return uint64_t(first);
  }
  return file.GetUintOr(key, fallback);
}

}  // namespace

Result<QuantModelInfo> ReadQuantModelInfo(const GgufFile& file) {
  PETREL_ASSIGN_OR_RETURN(std::string_view arch_view, file.GetString("general.architecture"));
  const std::string arch(arch_view);
  PETREL_ASSIGN_OR_RETURN(uint64_t n_layers, file.GetUint(arch + ".block_count"));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_heads, ReadCount(file, arch + ".attention.head_count", 1));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_kv_heads,
                          ReadCount(file, arch + ".attention.head_count_kv", n_heads));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_experts, file.GetUintOr(arch + ".expert_count", 0));
  QuantModelInfo model;
  model.n_layers = int(n_layers);
  model.n_gqa = n_kv_heads > 0 ? int(n_heads / n_kv_heads) : 1;
  model.n_experts = int(n_experts);
  model.has_output = file.FindTensor("output.weight") != nullptr;
  return model;
}

Status QuantizeGgufModel(const std::string& in_path, const std::string& out_path,
                         const QuantMix& mix, bool verbose,
                         const GgufWriter::ProgressFn& progress, const Imatrix* imatrix,
                         const std::string& imatrix_path, std::span<const LoraFile> lora) {
  PETREL_RETURN_IF_ERROR(CheckOutputIsNotInput(out_path, {in_path}));
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> in, GgufFile::Open(in_path));
  if (imatrix) PETREL_RETURN_IF_ERROR(CheckImatrixMatchesModel(*imatrix, imatrix_path, *in, in_path));
  // The adapters, resolved against the model as a run would load it; they own their f32 copies.
  std::unique_ptr<LoadedModel> base;
  if (!lora.empty()) {
    LoadOptions options;
    options.load_tokenizer = false;
    options.lora.assign(lora.begin(), lora.end());
    PETREL_ASSIGN_OR_RETURN(base, LoadModel(in_path, options));
  }
  PETREL_ASSIGN_OR_RETURN(QuantModelInfo model, ReadQuantModelInfo(*in));
  model.with_importance = imatrix != nullptr;
  // Every tensor's type first: one that cannot be written is refused before any output.
  std::vector<DType> types;
  FallbackReport fallbacks;
  for (const GgufTensorInfo& info : in->tensors()) {
    const int64_t n_in = info.desc.ne[0];
    const DType wanted = MixedTensorType(mix, info.name, info.desc.n_dims, model, n_in);
    types.push_back(FallbackForRow(wanted, n_in));
    fallbacks.Note(info.name, wanted, types.back(), n_in);
    const bool has_importance = imatrix && imatrix->entries.count(info.name) > 0;
    PETREL_RETURN_IF_ERROR(CheckCanWrite(types.back(), info.name, has_importance));
  }
  fallbacks.Finish(types.size());
  GgufWriter writer;
  for (const auto& [key, value] : in->metadata()) {
    if (key == "general.file_type" || key == "general.alignment" ||
        key == "general.quantization_version") {
      continue;
    }
    writer.CopyValue(key, value);
  }
  // In llama-quantize's order: a file whose tensors are its own is then its bytes too.
  writer.SetU32("general.quantization_version", 2);
  writer.SetU32("general.file_type", GgufFileType(mix));
  // `in` outlives Write(): the fill callbacks read the mapped source tensors.
  for (size_t t = 0; t < in->tensors().size(); ++t) {
    const GgufTensorInfo& info = in->tensors()[t];
    if (!CanDequantize(info.desc.dtype)) {
      return Error("%s: tensor %s has type %s, which cannot be converted", in_path.c_str(),
                   info.name.c_str(), DTypeName(info.desc.dtype));
    }
    const DType type = types[t];
    if (verbose) {
      std::fprintf(stderr, "%-32s %-6s -> %s\n", info.name.c_str(), DTypeName(info.desc.dtype),
                   DTypeName(type));
    }
    TensorDesc desc = info.desc;
    desc.dtype = type;
    const TensorDesc src_desc = info.desc;
    const void* src_data = info.data;
    // The importance of each column, per stacked matrix (ne[2] x ne[3]); empty: none.
    std::vector<std::vector<float>> importance;
    if (imatrix && TakesImportance(type)) {
      if (auto entry = imatrix->entries.find(info.name); entry != imatrix->entries.end()) {
        for (size_t m = 0; m < entry->second.n_mat(); ++m) {
          importance.push_back(entry->second.Importance(m));
        }
      }
    }
    std::vector<const LoraMerge*> merges;
    if (base && base->lora) merges = base->lora->MergesFor(info.name);
    writer.AddTensor(info.name, desc, [src_desc, src_data, desc, importance = std::move(importance),
                                       merges = std::move(merges)](void* dst) {
      const size_t n = size_t(src_desc.ne[0]);
      const int64_t rows_per_mat = src_desc.ne[1];
      std::vector<float> row(n);
      for (int64_t r = 0; r < src_desc.n_rows(); ++r) {
        DequantizeRow(src_desc.dtype, static_cast<const char*>(src_data) + r * src_desc.row_bytes(),
                      row.data(), n);
        if (!merges.empty()) ApplyLoraMerges(merges, r, row.data(), n);
        char* out = static_cast<char*>(dst) + r * desc.row_bytes();
        if (importance.empty()) {
          QuantizeRow(desc.dtype, row.data(), out, n);
        } else {
          QuantizeRowWeighted(desc.dtype, row.data(), out, n,
                              importance[size_t(r / rows_per_mat)].data());
        }
      }
    });
  }
  writer.SetProgress(progress);
  return writer.Write(out_path);
}

}  // namespace petrel
