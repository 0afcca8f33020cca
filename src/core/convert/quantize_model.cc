// QuantizeGgufModel: stream every tensor of a GGUF through f32 rows into its new type.
#include "core/convert/quantize_model.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "core/format/atomic_file.h"
#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "quant/quantize.h"

namespace petrel {
namespace {}  // namespace

Status QuantizeGgufModel(const std::string& in_path, const std::string& out_path,
                         const QuantMix& mix, bool verbose,
                         const GgufWriter::ProgressFn& progress) {
  PETREL_RETURN_IF_ERROR(CheckOutputIsNotInput(out_path, {in_path}));
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> in, GgufFile::Open(in_path));
  PETREL_ASSIGN_OR_RETURN(std::string_view arch, in->GetString("general.architecture"));
  PETREL_ASSIGN_OR_RETURN(uint64_t n_layers, in->GetUint(std::string(arch) + ".block_count"));
  GgufWriter writer;
  for (const auto& [key, value] : in->metadata()) {
    if (key == "general.file_type" || key == "general.alignment" ||
        key == "general.quantization_version") {
      continue;
    }
    writer.CopyValue(key, value);
  }
  writer.SetU32("general.file_type", GgufFileType(mix));
  writer.SetU32("general.quantization_version", 2);
  // `in` outlives Write(): the fill callbacks read the mapped source tensors.
  for (const GgufTensorInfo& info : in->tensors()) {
    if (!CanDequantize(info.desc.dtype)) {
      return Error("%s: tensor %s has type %s, which cannot be converted", in_path.c_str(),
                   info.name.c_str(), DTypeName(info.desc.dtype));
    }
    const int64_t n_in = info.desc.ne[0];
    const DType type = ChooseTensorType(mix, info.name, n_in, info.desc.n_dims, int(n_layers));
    if (verbose) {
      std::fprintf(stderr, "%-32s %-6s -> %s\n", info.name.c_str(), DTypeName(info.desc.dtype),
                   DTypeName(type));
    }
    TensorDesc desc = info.desc;
    desc.dtype = type;
    const TensorDesc src_desc = info.desc;
    const void* src_data = info.data;
    writer.AddTensor(info.name, desc, [src_desc, src_data, desc](void* dst) {
      const size_t n = size_t(src_desc.ne[0]);
      std::vector<float> row(n);
      for (int64_t r = 0; r < src_desc.n_rows(); ++r) {
        DequantizeRow(src_desc.dtype, static_cast<const char*>(src_data) + r * src_desc.row_bytes(),
                      row.data(), n);
        QuantizeRow(desc.dtype, row.data(), static_cast<char*>(dst) + r * desc.row_bytes(), n);
      }
    });
  }
  writer.SetProgress(progress);
  return writer.Write(out_path);
}

}  // namespace petrel
