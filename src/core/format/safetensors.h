// Safetensors reader (single file or a sharded set via model.safetensors.index.json): strict
// header validation, tensors mapped in place.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/format/mapped_file.h"
#include "core/base/status.h"
#include "core/base/tensor.h"

namespace petrel {

struct SafetensorsTensor {
  std::string name;
  TensorDesc desc;            // shape reversed into GGUF order: ne[0] = last safetensors dim
  const void* data = nullptr; // into the mapped file
  uint64_t bytes = 0;
  std::string file;           // which shard holds it (for messages)
  // Float8 e4m3fn bytes (dtype F8_E4M3), which have no DType: `desc.dtype` is kI8 (one byte per
  // element) and only the pre-quantized weight path (core/model/hf_quant.h) decodes them.
  bool f8_e4m3 = false;
};

class SafetensorsFile {
 public:
  // Parses the 8-byte header length, the JSON header (bounded size), dtypes (F32, F16, BF16,
  // F8_E4M3 and the integer/F64 types, which only pre-quantized checkpoints use), shapes and data_offsets, which must lie
  // in the data section, match shape x dtype size, and not overlap.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // "__metadata__"

 private:
  SafetensorsFile() = default;
  friend class SafetensorsParser;
  std::unique_ptr<MappedFile> file_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a Hugging Face model folder: `model.safetensors`, or the shards named by
// `model.safetensors.index.json` (weight_map), each opened once. Names must be unique across
// shards and every name in the index must exist in its shard.
class SafetensorsSet {
 public:
  static Result<std::unique_ptr<SafetensorsSet>> OpenFolder(const std::string& folder);

  const SafetensorsTensor* Find(std::string_view name) const;
  std::vector<const SafetensorsTensor*> tensors() const;
  size_t total_bytes() const;

 private:
  SafetensorsSet() = default;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsTensor*, std::less<>> index_;
};

}  // namespace petrel
