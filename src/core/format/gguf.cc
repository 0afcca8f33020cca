// GGUF reader: walks the header, metadata and tensor directory of a mapped file, checking every
// count, length and offset against the bytes that remain before trusting it.
#include "core/format/gguf.h"

#include <algorithm>
#include <bit>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>

namespace petrel {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is read in place as little-endian");

// Smallest encodings, used to bound counts before anything is reserved: a metadata entry is at
// least a key length (8) and a value type (4); a tensor info at least a name length (8), n_dims
// (4), a type (4) and an offset (8).
constexpr uint64_t kMinKvBytes = 12;
constexpr uint64_t kMinTensorInfoBytes = 24;

// One row per GgufType, in id order: printed name, element bytes (0 for string and array), and
// the integer family (0: not an integer, 1: unsigned, 2: signed).
struct GgufTypeTraits {
  const char* name;
  uint8_t bytes;
  uint8_t integer;
};
constexpr GgufTypeTraits kGgufTypeTraits[] = {
    {"u8", 1, 1},  {"i8", 1, 2},  {"u16", 2, 1},  {"i16", 2, 2},    {"u32", 4, 1},
    {"i32", 4, 2}, {"f32", 4, 0}, {"bool", 1, 0}, {"string", 0, 0}, {"array", 0, 0},
    {"u64", 8, 1}, {"i64", 8, 2}, {"f64", 8, 0},
};
static_assert(std::size(kGgufTypeTraits) == size_t(GgufType::kFloat64) + 1, "one row per type");

bool IsKnownType(uint32_t id) { return id < std::size(kGgufTypeTraits); }
const GgufTypeTraits& TypeTraits(GgufType type) {
  PETREL_DCHECK(IsKnownType(uint32_t(type)));
  return kGgufTypeTraits[size_t(type)];
}
bool IsUnsigned(GgufType type) { return TypeTraits(type).integer == 1; }
bool IsSigned(GgufType type) { return TypeTraits(type).integer == 2; }

template <typename T>
T Load(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

}  // namespace

std::string EscapeForMessage(std::string_view text) {
  constexpr size_t kMaxShown = 96;
  std::string out;
  size_t i = 0;
  while (i < text.size() && i < kMaxShown) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    // Length of a well-formed UTF-8 sequence starting here (1 for ASCII), or 0 if malformed.
    size_t length = c < 0x80                ? 1
                    : c >= 0xc2 && c < 0xe0 ? 2
                    : c >= 0xe0 && c < 0xf0 ? 3
                    : c >= 0xf0 && c < 0xf5 ? 4
                                            : 0;
    for (size_t k = 1; k < length; ++k) {
      if (i + k >= text.size() || (static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80) {
        length = 0;
      }
    }
    if (length == 0 || c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  if (i < text.size()) out += "...";
  return out;
}

const char* GgufTypeName(GgufType type) {
  return IsKnownType(uint32_t(type)) ? TypeTraits(type).name : "unknown";
}

bool GgufValue::is_integer() const { return IsUnsigned(type) || IsSigned(type); }

bool GgufValue::is_float() const {
  return type == GgufType::kFloat32 || type == GgufType::kFloat64;
}

int64_t GgufValue::IntAt(uint64_t index) const {
  PETREL_DCHECK(index < count);
  const uint8_t* at = elems + index * TypeTraits(elem_type).bytes;
  switch (elem_type) {
    case GgufType::kUint8:
    case GgufType::kBool:
      return Load<uint8_t>(at);
    case GgufType::kInt8:
      return Load<int8_t>(at);
    case GgufType::kUint16:
      return Load<uint16_t>(at);
    case GgufType::kInt16:
      return Load<int16_t>(at);
    case GgufType::kUint32:
      return Load<uint32_t>(at);
    case GgufType::kInt32:
      return Load<int32_t>(at);
    case GgufType::kUint64:
      return int64_t(Load<uint64_t>(at));
    case GgufType::kInt64:
      return Load<int64_t>(at);
    case GgufType::kFloat32:
      return int64_t(Load<float>(at));
    case GgufType::kFloat64:
      return int64_t(Load<double>(at));
    case GgufType::kString:
    case GgufType::kArray:
      break;
  }
  PETREL_CHECK(false && "IntAt on a non-numeric array");
  return 0;
}

double GgufValue::FloatAt(uint64_t index) const {
  PETREL_DCHECK(index < count);
  const uint8_t* at = elems + index * TypeTraits(elem_type).bytes;
  switch (elem_type) {
    case GgufType::kFloat32:
      return Load<float>(at);
    case GgufType::kFloat64:
      return Load<double>(at);
    case GgufType::kUint64:
      return double(Load<uint64_t>(at));
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kInt64:
    case GgufType::kBool:
      return double(IntAt(index));
    case GgufType::kString:
    case GgufType::kArray:
      break;
  }
  PETREL_CHECK(false && "FloatAt on a non-numeric array");
  return 0.0;
}

// One pass over the mapped bytes. Every read checks the bytes left first; every error names the
// file and the byte offset where the bad field starts.
class GgufParser {
 public:
  GgufParser(GgufFile& file) : file_(file), data_(file.file_->data()), size_(file.file_->size()) {}

  Status Parse() {
    PETREL_RETURN_IF_ERROR(ParseHeader());
    for (uint64_t i = 0; i < n_kv_; ++i) PETREL_RETURN_IF_ERROR(ParseKv());
    PETREL_RETURN_IF_ERROR(ParseAlignment());
    for (uint64_t i = 0; i < n_tensors_; ++i) PETREL_RETURN_IF_ERROR(ParseTensorInfo());
    return PlaceTensors();
  }

 private:
  Status Fail(uint64_t at, const char* format, ...) __attribute__((format(printf, 3, 4))) {
    char message[512];
    va_list args;
    va_start(args, format);
    std::vsnprintf(message, sizeof(message), format, args);
    va_end(args);
    return Error("gguf: %s: byte %llu: %s%s", file_.path().c_str(), (unsigned long long)at,
                 context_.c_str(), message);
  }

  uint64_t left() const { return size_ - pos_; }

  Status Need(uint64_t bytes, const char* what) {
    if (bytes > left()) {
      return Fail(pos_, "truncated %s: needs %llu bytes, %llu left", what,
                  (unsigned long long)bytes, (unsigned long long)left());
    }
    return Status::Ok();
  }

  template <typename T>
  Status Read(const char* what, T* out) {
    PETREL_RETURN_IF_ERROR(Need(sizeof(T), what));
    *out = Load<T>(data_ + pos_);
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status ReadString(const char* what, std::string_view* out) {
    const uint64_t start = pos_;
    uint64_t length = 0;
    PETREL_RETURN_IF_ERROR(Read(what, &length));
    if (length > left()) {
      return Fail(start, "%s length %llu exceeds the %llu bytes left", what,
                  (unsigned long long)length, (unsigned long long)left());
    }
    *out = std::string_view(reinterpret_cast<const char*>(data_ + pos_), size_t(length));
    pos_ += length;
    return Status::Ok();
  }

  Status ParseHeader() {
    if (size_ < 4 || std::memcmp(data_, "GGUF", 4) != 0) {
      return Fail(0, "not a GGUF file (the magic \"GGUF\" is missing)");
    }
    pos_ = 4;
    PETREL_RETURN_IF_ERROR(Read("version", &file_.version_));
    if (file_.version_ == 1) return Fail(4, "GGUF version 1 is not supported (2 and 3 are)");
    if (file_.version_ != 2 && file_.version_ != 3) {
      return Fail(4, "GGUF version %u is not supported (2 and 3 are; big-endian files are not)",
                  file_.version_);
    }
    PETREL_RETURN_IF_ERROR(Read("tensor count", &n_tensors_));
    PETREL_RETURN_IF_ERROR(Read("metadata count", &n_kv_));
    // Bound both counts by the bytes left before anything is sized from them.
    if (n_kv_ > left() / kMinKvBytes) {
      return Fail(16, "metadata count %llu cannot fit in the %llu bytes left",
                  (unsigned long long)n_kv_, (unsigned long long)left());
    }
    if (n_tensors_ > (left() - n_kv_ * kMinKvBytes) / kMinTensorInfoBytes) {
      return Fail(8, "tensor count %llu cannot fit in the %llu bytes left",
                  (unsigned long long)n_tensors_, (unsigned long long)left());
    }
    file_.metadata_.reserve(size_t(n_kv_));
    file_.tensors_.reserve(size_t(n_tensors_));
    return Status::Ok();
  }

  Status ParseKv() {
    const uint64_t start = pos_;
    std::string_view key;
    PETREL_RETURN_IF_ERROR(ReadString("key", &key));
    if (key.empty()) return Fail(start, "empty metadata key");
    if (file_.metadata_index_.count(key) != 0) {
      return Fail(start, "duplicate metadata key '%s'", EscapeForMessage(key).c_str());
    }
    GgufValue value;
    value.file_offset = pos_;
    uint32_t type_id = 0;
    PETREL_RETURN_IF_ERROR(Read("value type", &type_id));
    if (!IsKnownType(type_id)) {
      return Fail(value.file_offset, "key '%s': unknown value type %u",
                  EscapeForMessage(key).c_str(), type_id);
    }
    value.type = GgufType(type_id);
    context_ = "key '" + EscapeForMessage(key) + "': ";
    PETREL_RETURN_IF_ERROR(value.type == GgufType::kArray ? ParseArray(&value)
                                                          : ParseScalar(&value));
    context_.clear();
    file_.metadata_index_.emplace(std::string(key), file_.metadata_.size());
    file_.metadata_.emplace_back(std::string(key), std::move(value));
    return Status::Ok();
  }

  Status ParseScalar(GgufValue* value) {
    const uint64_t start = pos_;
    switch (value->type) {
      case GgufType::kUint8:
        return ReadUnsigned<uint8_t>(value);
      case GgufType::kUint16:
        return ReadUnsigned<uint16_t>(value);
      case GgufType::kUint32:
        return ReadUnsigned<uint32_t>(value);
      case GgufType::kUint64:
        return ReadUnsigned<uint64_t>(value);
      case GgufType::kInt8:
        return ReadSigned<int8_t>(value);
      case GgufType::kInt16:
        return ReadSigned<int16_t>(value);
      case GgufType::kInt32:
        return ReadSigned<int32_t>(value);
      case GgufType::kInt64:
        return ReadSigned<int64_t>(value);
      case GgufType::kFloat32: {
        float f = 0;
        PETREL_RETURN_IF_ERROR(Read("f32 value", &f));
        value->f64 = f;
        return Status::Ok();
      }
      case GgufType::kFloat64:
        return Read("f64 value", &value->f64);
      case GgufType::kBool: {
        uint8_t b = 0;
        PETREL_RETURN_IF_ERROR(Read("bool value", &b));
        if (b > 1) return Fail(start, "bool value %u is neither 0 nor 1", b);
        value->u64 = b;
        value->i64 = b;
        return Status::Ok();
      }
      case GgufType::kString:
        return ReadString("string", &value->str);
      case GgufType::kArray:
        break;
    }
    return Fail(start, "internal: array parsed as a scalar");
  }

  template <typename T>
  Status ReadUnsigned(GgufValue* value) {
    T v = 0;
    PETREL_RETURN_IF_ERROR(Read("integer value", &v));
    value->u64 = v;
    if (uint64_t(v) <= uint64_t(std::numeric_limits<int64_t>::max())) value->i64 = int64_t(v);
    return Status::Ok();
  }

  template <typename T>
  Status ReadSigned(GgufValue* value) {
    T v = 0;
    PETREL_RETURN_IF_ERROR(Read("integer value", &v));
    value->i64 = v;
    if (v >= 0) value->u64 = uint64_t(v);
    return Status::Ok();
  }

  Status ParseArray(GgufValue* value) {
    const uint64_t start = pos_;
    uint32_t elem_id = 0;
    PETREL_RETURN_IF_ERROR(Read("array element type", &elem_id));
    if (!IsKnownType(elem_id)) return Fail(start, "unknown array element type %u", elem_id);
    value->elem_type = GgufType(elem_id);
    if (value->elem_type == GgufType::kArray) {
      return Fail(start, "nested arrays are not supported");
    }
    const uint64_t count_at = pos_;
    PETREL_RETURN_IF_ERROR(Read("array count", &value->count));
    if (value->elem_type == GgufType::kString) {
      // Each string needs at least its 8-byte length, which bounds the reservation.
      if (value->count > left() / 8) {
        return Fail(count_at, "array of %llu strings cannot fit in the %llu bytes left",
                    (unsigned long long)value->count, (unsigned long long)left());
      }
      value->strings.reserve(size_t(value->count));
      for (uint64_t i = 0; i < value->count; ++i) {
        std::string_view element;
        PETREL_RETURN_IF_ERROR(ReadString("string", &element));
        value->strings.push_back(element);
      }
      return Status::Ok();
    }
    const uint64_t elem_bytes = TypeTraits(value->elem_type).bytes;
    uint64_t total = 0;
    if (__builtin_mul_overflow(value->count, elem_bytes, &total) || total > left()) {
      return Fail(count_at, "array of %llu %s exceeds the %llu bytes left",
                  (unsigned long long)value->count, GgufTypeName(value->elem_type),
                  (unsigned long long)left());
    }
    value->elems = data_ + pos_;
    pos_ += total;
    return Status::Ok();
  }

  // `general.alignment` is a u32 by the specification; anything else is an error, never a guess.
  Status ParseAlignment() {
    const GgufValue* value = file_.Find("general.alignment");
    if (value == nullptr) return Status::Ok();
    if (value->type != GgufType::kUint32) {
      return Fail(value->file_offset, "key general.alignment: expected u32, found %s",
                  GgufTypeName(value->type));
    }
    if (value->u64 == 0 || !std::has_single_bit(value->u64)) {
      return Fail(value->file_offset, "key general.alignment: %llu is not a power of two",
                  (unsigned long long)value->u64);
    }
    file_.alignment_ = value->u64;
    return Status::Ok();
  }

  Status ParseTensorInfo() {
    const uint64_t start = pos_;
    std::string_view name;
    PETREL_RETURN_IF_ERROR(ReadString("tensor name", &name));
    if (name.empty()) return Fail(start, "empty tensor name");
    const std::string shown = EscapeForMessage(name);
    if (file_.tensor_index_.count(name) != 0) {
      return Fail(start, "duplicate tensor name '%s'", shown.c_str());
    }
    GgufTensorInfo info;
    info.name = std::string(name);
    const uint64_t dims_at = pos_;
    uint32_t n_dims = 0;
    PETREL_RETURN_IF_ERROR(Read("tensor n_dims", &n_dims));
    if (n_dims < 1 || n_dims > uint32_t(kMaxDims)) {
      return Fail(dims_at, "tensor '%s': n_dims %u is not in 1..%d", shown.c_str(), n_dims,
                  kMaxDims);
    }
    info.desc.n_dims = int(n_dims);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = pos_;
      uint64_t dim = 0;
      PETREL_RETURN_IF_ERROR(Read("tensor dimension", &dim));
      if (dim == 0) return Fail(dim_at, "tensor '%s': dimension %u is 0", shown.c_str(), d);
      if (__builtin_mul_overflow(n_elems, dim, &n_elems) ||
          n_elems > uint64_t(std::numeric_limits<int64_t>::max())) {
        return Fail(dim_at, "tensor '%s': element count overflows at dimension %u (%llu)",
                    shown.c_str(), d, (unsigned long long)dim);
      }
      info.desc.ne[d] = int64_t(dim);
    }
    const uint64_t type_at = pos_;
    uint32_t ggml_id = 0;
    PETREL_RETURN_IF_ERROR(Read("tensor type", &ggml_id));
    const std::optional<DType> dtype = DTypeFromGgmlId(ggml_id);
    if (!dtype) return Fail(type_at, "tensor '%s': unknown ggml type %u", shown.c_str(), ggml_id);
    info.desc.dtype = *dtype;
    const std::optional<uint64_t> row_bytes = RowBytes(*dtype, uint64_t(info.desc.ne[0]));
    if (!row_bytes) {
      return Fail(type_at, "tensor '%s': row of %lld elements is not a whole number of %s blocks",
                  shown.c_str(), (long long)info.desc.ne[0], DTypeName(*dtype));
    }
    if (__builtin_mul_overflow(*row_bytes, n_elems / uint64_t(info.desc.ne[0]), &info.bytes)) {
      return Fail(type_at, "tensor '%s': byte size overflows", shown.c_str());
    }
    const uint64_t offset_at = pos_;
    PETREL_RETURN_IF_ERROR(Read("tensor offset", &info.offset));
    if (info.offset % file_.alignment_ != 0) {
      return Fail(offset_at, "tensor '%s': offset %llu is not a multiple of the alignment %llu",
                  shown.c_str(), (unsigned long long)info.offset,
                  (unsigned long long)file_.alignment_);
    }
    offsets_.push_back(offset_at);
    file_.tensor_index_.emplace(info.name, file_.tensors_.size());
    file_.tensors_.push_back(std::move(info));
    return Status::Ok();
  }

  // Finds the data section and checks that each tensor lies inside it, without overlaps.
  Status PlaceTensors() {
    const uint64_t alignment = file_.alignment_;
    uint64_t data_offset = 0;
    if (__builtin_add_overflow(pos_, alignment - 1, &data_offset)) data_offset = UINT64_MAX;
    data_offset -= data_offset % alignment;
    if (data_offset > size_) {
      // A file without tensors (a vocabulary) may end right after its metadata.
      if (file_.tensors_.empty()) {
        file_.data_offset_ = size_;
        return Status::Ok();
      }
      return Fail(pos_, "padding to the alignment %llu runs past the end of the file",
                  (unsigned long long)alignment);
    }
    file_.data_offset_ = data_offset;
    const uint64_t data_bytes = size_ - data_offset;
    std::vector<size_t> order(file_.tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) {
      GgufTensorInfo& info = file_.tensors_[i];
      uint64_t end = 0;
      if (__builtin_add_overflow(info.offset, info.bytes, &end) || end > data_bytes) {
        return Fail(offsets_[i], "tensor '%s': data [%llu, +%llu) ends past the %llu data bytes",
                    EscapeForMessage(info.name).c_str(), (unsigned long long)info.offset,
                    (unsigned long long)info.bytes, (unsigned long long)data_bytes);
      }
      info.data = data_ + data_offset + info.offset;
      order[i] = i;
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return file_.tensors_[a].offset < file_.tensors_[b].offset;
    });
    for (size_t i = 1; i < order.size(); ++i) {
      const GgufTensorInfo& prev = file_.tensors_[order[i - 1]];
      const GgufTensorInfo& next = file_.tensors_[order[i]];
      if (next.offset < prev.offset + prev.bytes) {
        return Fail(offsets_[order[i]], "tensor '%s': data overlaps tensor '%s'",
                    EscapeForMessage(next.name).c_str(), EscapeForMessage(prev.name).c_str());
      }
    }
    return Status::Ok();
  }

  GgufFile& file_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  std::string context_;            // "key 'name': " while a value is parsed
  std::vector<uint64_t> offsets_;  // file offset of each tensor's offset field, for messages
};

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  Result<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status().Wrap("gguf");
  file->file_ = std::move(mapped).value();
  GgufParser parser(*file);
  PETREL_RETURN_IF_ERROR(parser.Parse());
  return file;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status WrongType(std::string_view key, const char* expected, const GgufValue& value) {
  return Error("key %s: expected %s, found %s", EscapeForMessage(key).c_str(), expected,
               GgufTypeName(value.type));
}

Status Missing(std::string_view key) {
  return Error("key %s: not found", EscapeForMessage(key).c_str());
}

}  // namespace

Result<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(key);
  if (!value->is_integer()) return WrongType(key, "an integer", *value);
  if (IsSigned(value->type) && value->i64 < 0) {
    return Error("key %s: %lld is negative, expected an unsigned integer",
                 EscapeForMessage(key).c_str(), (long long)value->i64);
  }
  return value->u64;
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(key);
  if (!value->is_integer()) return WrongType(key, "an integer", *value);
  if (IsUnsigned(value->type) && value->u64 > uint64_t(std::numeric_limits<int64_t>::max())) {
    return Error("key %s: %llu does not fit a signed 64-bit integer", EscapeForMessage(key).c_str(),
                 (unsigned long long)value->u64);
  }
  return value->i64;
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(key);
  if (value->is_float()) return value->f64;
  if (!value->is_integer()) return WrongType(key, "a number", *value);
  if (value->type == GgufType::kUint64) return double(value->u64);
  return double(value->i64);
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(key);
  if (value->type != GgufType::kBool) return WrongType(key, "bool", *value);
  return value->u64 != 0;
}

Result<std::string_view> GgufFile::GetString(std::string_view key) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(key);
  if (value->type != GgufType::kString) return WrongType(key, "string", *value);
  return value->str;
}

Result<const GgufValue*> GgufFile::GetArray(std::string_view key, GgufType elem_type) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) return Missing(key);
  if (value->type != GgufType::kArray) return WrongType(key, "array", *value);
  if (value->elem_type != elem_type) {
    return Error("key %s: expected an array of %s, found an array of %s",
                 EscapeForMessage(key).c_str(), GgufTypeName(elem_type),
                 GgufTypeName(value->elem_type));
  }
  return value;
}

Result<uint64_t> GgufFile::GetUintOr(std::string_view key, uint64_t fallback) const {
  return Find(key) == nullptr ? Result<uint64_t>(fallback) : GetUint(key);
}

Result<double> GgufFile::GetFloatOr(std::string_view key, double fallback) const {
  return Find(key) == nullptr ? Result<double>(fallback) : GetFloat(key);
}

Result<bool> GgufFile::GetBoolOr(std::string_view key, bool fallback) const {
  return Find(key) == nullptr ? Result<bool>(fallback) : GetBool(key);
}

Result<std::string_view> GgufFile::GetStringOr(std::string_view key,
                                               std::string_view fallback) const {
  return Find(key) == nullptr ? Result<std::string_view>(fallback) : GetString(key);
}

}  // namespace petrel
