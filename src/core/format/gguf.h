// GGUF v2/v3 reader: strict, overflow-safe parsing of the header, metadata and tensor directory.
// Tensor data stays in the mapped file; TensorInfo::data points into it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/format/mapped_file.h"
#include "core/base/status.h"
#include "core/base/tensor.h"

namespace petrel {

// Metadata value types, numbered as in the GGUF specification.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* GgufTypeName(GgufType type);

// Makes a name read from a file safe to put in a one-line error message: control characters,
// quotes, backslashes and malformed UTF-8 become `\xNN`; long names are cut at 96 bytes.
std::string EscapeForMessage(std::string_view text);

// One metadata value. Scalars are decoded; strings are views into the mapped file; arrays keep
// their element type and count, with strings pre-split (bounded: each needs >= 8 file bytes) and
// numbers left in the file (read with the typed accessors).
struct GgufValue {
  GgufType type = GgufType::kUint8;
  // Scalars (the field matching `type`'s family is set).
  uint64_t u64 = 0;  // unsigned integers and bool
  int64_t i64 = 0;   // signed integers (also set for unsigned ones that fit)
  double f64 = 0.0;  // floats
  std::string_view str;
  // Arrays.
  GgufType elem_type = GgufType::kUint8;
  uint64_t count = 0;
  const uint8_t* elems = nullptr;         // raw little-endian numbers (may be unaligned)
  std::vector<std::string_view> strings;  // for arrays of strings
  uint64_t file_offset = 0;               // where the value starts, for error messages

  bool is_integer() const;
  bool is_float() const;
  // Typed element access for numeric arrays (caller checks index < count).
  int64_t IntAt(uint64_t index) const;
  double FloatAt(uint64_t index) const;
};

struct GgufTensorInfo {
  std::string name;
  TensorDesc desc;
  uint64_t offset = 0;  // relative to the start of the data section
  uint64_t bytes = 0;
  const void* data = nullptr;  // into the mapped file
};

class GgufFile {
 public:
  // Opens, maps and validates. Every failure names the problem and its byte offset or key.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::string& path() const { return file_->path(); }
  size_t file_bytes() const { return file_->size(); }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;

  // Typed getters: error if absent or of the wrong kind ("key llama.block_count: expected an
  // integer, found string"). Integers accept any integer type whose value fits.
  Result<uint64_t> GetUint(std::string_view key) const;
  Result<int64_t> GetInt(std::string_view key) const;
  Result<double> GetFloat(std::string_view key) const;  // accepts integers too
  Result<bool> GetBool(std::string_view key) const;
  Result<std::string_view> GetString(std::string_view key) const;
  Result<const GgufValue*> GetArray(std::string_view key, GgufType elem_type) const;
  // Same, with a default when the key is absent (a present key of the wrong type is still an
  // error).
  Result<uint64_t> GetUintOr(std::string_view key, uint64_t fallback) const;
  Result<double> GetFloatOr(std::string_view key, double fallback) const;
  Result<bool> GetBoolOr(std::string_view key, bool fallback) const;
  Result<std::string_view> GetStringOr(std::string_view key, std::string_view fallback) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  friend class GgufParser;

  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace petrel
