// Safetensors reader: bounded JSON header, validated dtypes, shapes and data offsets; shards
// joined through model.safetensors.index.json.
#include "core/format/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdarg>
#include <cstring>
#include <exception>
#include <optional>

#include "core/format/gguf.h"  // EscapeForMessage
#include "nlohmann/json.hpp"

namespace petrel {
namespace {

// Real headers are a few hundred kilobytes; the bound keeps a corrupt length from driving a
// huge parse.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr uint64_t kMaxDim = 1ull << 40;

std::optional<DType> DTypeFromSafetensors(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  if (name == "F64") return DType::kF64;
  if (name == "I8") return DType::kI8;
  if (name == "I16") return DType::kI16;
  if (name == "I32") return DType::kI32;
  if (name == "I64") return DType::kI64;
  // F8_E4M3 is read as bytes (SafetensorsTensor::f8_e4m3), and so is U8 (packed MXFP4
  // `_blocks` and E8M0 `_scales`). BOOL and F8_E5M2 have no DType; the caller reports them.
  if (name == "F8_E4M3" || name == "U8") return DType::kI8;
  return std::nullopt;
}

// A JSON number that is a non-negative integer, else nullopt.
std::optional<uint64_t> UnsignedOf(const nlohmann::json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v >= 0) return uint64_t(v);
  }
  return std::nullopt;
}

bool IsFile(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

bool IsDirectory(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

}  // namespace

class SafetensorsParser {
 public:
  explicit SafetensorsParser(SafetensorsFile& file) : file_(file) {}

  Status Parse() {
    const uint8_t* data = file_.file_->data();
    const uint64_t size = file_.file_->size();
    if (size < 8) return Fail("file is %llu bytes, too short for the header length", ULL(size));
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, data, 8);
    if (header_bytes == 0) return Fail("header length is 0");
    if (header_bytes > kMaxHeaderBytes) {
      return Fail("header length %llu exceeds the limit of %llu bytes", ULL(header_bytes),
                  ULL(kMaxHeaderBytes));
    }
    if (header_bytes > size - 8) {
      return Fail("header length %llu exceeds the %llu bytes after it", ULL(header_bytes),
                  ULL(size - 8));
    }
    data_ = data + 8 + header_bytes;
    data_bytes_ = size - 8 - header_bytes;
    const nlohmann::json header =
        nlohmann::json::parse(data + 8, data + 8 + header_bytes, nullptr, false);
    if (header.is_discarded()) return Fail("header is not valid JSON");
    if (!header.is_object()) return Fail("header is not a JSON object");
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        PETREL_RETURN_IF_ERROR(ParseMetadata(it.value()));
      } else {
        PETREL_RETURN_IF_ERROR(ParseTensor(it.key(), it.value()));
      }
    }
    return CheckOverlaps();
  }

 private:
  static unsigned long long ULL(uint64_t v) { return v; }

  Status Fail(const char* format, ...) __attribute__((format(printf, 2, 3))) {
    char message[512];
    va_list args;
    va_start(args, format);
    std::vsnprintf(message, sizeof(message), format, args);
    va_end(args);
    return Error("safetensors: %s: %s", file_.file_->path().c_str(), message);
  }

  Status ParseMetadata(const nlohmann::json& metadata) {
    if (!metadata.is_object()) return Fail("__metadata__ is not an object");
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
      if (!it.value().is_string()) {
        return Fail("__metadata__ '%s' is not a string", EscapeForMessage(it.key()).c_str());
      }
      file_.metadata_[it.key()] = it.value().get<std::string>();
    }
    return Status::Ok();
  }

  Status ParseTensor(const std::string& name, const nlohmann::json& entry) {
    const std::string shown = EscapeForMessage(name);
    const char* where = shown.c_str();
    if (name.empty()) return Fail("empty tensor name");
    if (!entry.is_object()) return Fail("tensor '%s': entry is not an object", where);
    auto dtype_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) {
      return Fail("tensor '%s': dtype missing or not a string", where);
    }
    const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
    const std::optional<DType> dtype = DTypeFromSafetensors(dtype_name);
    if (!dtype) {
      return Fail("tensor '%s': dtype '%s' is not supported", where,
                  EscapeForMessage(dtype_name).c_str());
    }
    if (shape_it == entry.end() || !shape_it->is_array()) {
      return Fail("tensor '%s': shape missing or not an array", where);
    }
    const size_t n_dims = shape_it->size();
    if (n_dims > size_t(kMaxDims)) {
      return Fail("tensor '%s': %zu dimensions, at most %d are supported", where, n_dims, kMaxDims);
    }
    SafetensorsTensor tensor;
    tensor.name = name;
    tensor.file = file_.file_->path();
    tensor.desc.dtype = *dtype;
    tensor.f8_e4m3 = dtype_name == "F8_E4M3";
    // A 0-dim scalar is stored as one element; keep it as shape [1].
    tensor.desc.n_dims = n_dims == 0 ? 1 : int(n_dims);
    for (size_t d = 0; d < n_dims; ++d) {
      const std::optional<uint64_t> dim = UnsignedOf((*shape_it)[d]);
      if (!dim || *dim > kMaxDim) {
        return Fail("tensor '%s': shape[%zu] is not an integer in 0..2^40", where, d);
      }
      // Reverse into GGUF order: ne[0] is the last (contiguous) safetensors dimension.
      tensor.desc.ne[n_dims - 1 - d] = int64_t(*dim);
    }
    uint64_t bytes = Traits(*dtype).block_bytes;
    for (size_t d = 0; d < n_dims; ++d) {
      if (__builtin_mul_overflow(bytes, uint64_t(tensor.desc.ne[d]), &bytes)) {
        return Fail("tensor '%s': byte size of shape %s overflows", where,
                    tensor.desc.ShapeString().c_str());
      }
    }
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
      return Fail("tensor '%s': data_offsets missing or not a pair", where);
    }
    const std::optional<uint64_t> begin = UnsignedOf((*offsets_it)[0]);
    const std::optional<uint64_t> end = UnsignedOf((*offsets_it)[1]);
    if (!begin || !end) return Fail("tensor '%s': data_offsets are not integers >= 0", where);
    if (*begin > *end || *end > data_bytes_) {
      return Fail("tensor '%s': data_offsets [%llu, %llu] outside the %llu data bytes", where,
                  ULL(*begin), ULL(*end), ULL(data_bytes_));
    }
    if (*end - *begin != bytes) {
      return Fail("tensor '%s': data_offsets span %llu bytes, shape %s of %s needs %llu", where,
                  ULL(*end - *begin), tensor.desc.ShapeString().c_str(), dtype_name.c_str(),
                  ULL(bytes));
    }
    tensor.data = data_ + *begin;
    tensor.bytes = bytes;
    spans_.push_back(Span{*begin, *end, file_.tensors_.size()});
    file_.index_.emplace(name, file_.tensors_.size());
    file_.tensors_.push_back(std::move(tensor));
    return Status::Ok();
  }

  Status CheckOverlaps() {
    std::sort(spans_.begin(), spans_.end(),
              [](const Span& a, const Span& b) { return a.begin < b.begin; });
    const Span* prev = nullptr;
    for (const Span& span : spans_) {
      if (span.begin == span.end) continue;  // empty tensors occupy nothing
      if (prev != nullptr && span.begin < prev->end) {
        return Fail("tensor '%s': data overlaps tensor '%s'",
                    EscapeForMessage(file_.tensors_[span.index].name).c_str(),
                    EscapeForMessage(file_.tensors_[prev->index].name).c_str());
      }
      prev = &span;
    }
    return Status::Ok();
  }

  struct Span {
    uint64_t begin, end;
    size_t index;
  };
  SafetensorsFile& file_;
  const uint8_t* data_ = nullptr;
  uint64_t data_bytes_ = 0;
  std::vector<Span> spans_;
};

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  Result<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status().Wrap("safetensors");
  file->file_ = std::move(mapped).value();
  // nlohmann::json is used without exceptions where it offers that; this catches what remains
  // (allocation failure) so nothing escapes the library.
  try {
    SafetensorsParser parser(*file);
    PETREL_RETURN_IF_ERROR(parser.Parse());
  } catch (const std::exception& e) {
    return Error("safetensors: %s: %s", path.c_str(), e.what());
  }
  return file;
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

// Reads the index's weight_map as (tensor name, shard file name) pairs.
Status ReadWeightMap(const std::string& index_path,
                     std::vector<std::pair<std::string, std::string>>* weight_map) {
  Result<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(index_path);
  if (!mapped.ok()) return mapped.status().Wrap("safetensors");
  const MappedFile& file = **mapped;
  if (file.size() > kMaxHeaderBytes) {
    return Error("safetensors: %s: index of %zu bytes is too large", index_path.c_str(),
                 file.size());
  }
  const nlohmann::json index =
      nlohmann::json::parse(file.data(), file.data() + file.size(), nullptr, false);
  if (index.is_discarded() || !index.is_object()) {
    return Error("safetensors: %s: not a JSON object", index_path.c_str());
  }
  auto map_it = index.find("weight_map");
  if (map_it == index.end() || !map_it->is_object()) {
    return Error("safetensors: %s: weight_map missing or not an object", index_path.c_str());
  }
  for (auto it = map_it->begin(); it != map_it->end(); ++it) {
    const std::string shown = EscapeForMessage(it.key());
    if (!it.value().is_string()) {
      return Error("safetensors: %s: weight_map '%s' is not a string", index_path.c_str(),
                   shown.c_str());
    }
    const std::string& shard = it.value().get_ref<const std::string&>();
    // Shards live beside the index; a path would let an index reach outside the folder.
    if (shard.empty() || shard.find('/') != std::string::npos) {
      return Error("safetensors: %s: weight_map '%s' names shard '%s', not a file name",
                   index_path.c_str(), shown.c_str(), EscapeForMessage(shard).c_str());
    }
    weight_map->emplace_back(it.key(), shard);
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<SafetensorsSet>> SafetensorsSet::OpenFolder(const std::string& folder) {
  if (!IsDirectory(folder)) return Error("safetensors: %s: not a folder", folder.c_str());
  std::unique_ptr<SafetensorsSet> set(new SafetensorsSet());
  const std::string index_path = folder + "/model.safetensors.index.json";
  std::vector<std::pair<std::string, std::string>> weight_map;
  std::vector<std::string> shards;
  if (IsFile(index_path)) {
    try {
      PETREL_RETURN_IF_ERROR(ReadWeightMap(index_path, &weight_map));
    } catch (const std::exception& e) {
      return Error("safetensors: %s: %s", index_path.c_str(), e.what());
    }
    for (const auto& [name, shard] : weight_map) {
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    }
  } else if (IsFile(folder + "/model.safetensors")) {
    shards.push_back("model.safetensors");
  } else {
    return Error("safetensors: %s: neither model.safetensors nor model.safetensors.index.json",
                 folder.c_str());
  }
  for (const std::string& shard : shards) {
    PETREL_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                            SafetensorsFile::Open(folder + "/" + shard));
    for (const SafetensorsTensor& tensor : file->tensors()) {
      auto [it, inserted] = set->index_.emplace(tensor.name, &tensor);
      if (!inserted) {
        return Error("safetensors: %s: tensor '%s' is in both %s and %s", folder.c_str(),
                     EscapeForMessage(tensor.name).c_str(), it->second->file.c_str(),
                     tensor.file.c_str());
      }
    }
    set->files_.push_back(std::move(file));
  }
  for (const auto& [name, shard] : weight_map) {
    const SafetensorsTensor* tensor = set->Find(name);
    if (tensor == nullptr || tensor->file != folder + "/" + shard) {
      return Error("safetensors: %s: index maps tensor '%s' to %s, which does not hold it",
                   index_path.c_str(), EscapeForMessage(name).c_str(),
                   EscapeForMessage(shard).c_str());
    }
  }
  return set;
}

const SafetensorsTensor* SafetensorsSet::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<const SafetensorsTensor*> SafetensorsSet::tensors() const {
  std::vector<const SafetensorsTensor*> out;
  for (const auto& file : files_) {
    for (const SafetensorsTensor& tensor : file->tensors()) out.push_back(&tensor);
  }
  return out;
}

size_t SafetensorsSet::total_bytes() const {
  size_t total = 0;
  for (const auto& file : files_) {
    for (const SafetensorsTensor& tensor : file->tensors()) total += tensor.bytes;
  }
  return total;
}

}  // namespace petrel
