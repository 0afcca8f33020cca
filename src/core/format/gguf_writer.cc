// GGUF writer: serialized metadata entries, then tensor infos, then each tensor's data produced by
// its callback into one reused buffer and streamed out with padding.
#include "core/format/gguf_writer.h"

#include <bit>
#include <cstdio>
#include <cstring>

#include "core/format/atomic_file.h"

namespace petrel {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is written as little-endian");

template <typename T>
void Put(std::vector<uint8_t>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

void PutString(std::vector<uint8_t>& out, std::string_view text) {
  Put<uint64_t>(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
}

void PutType(std::vector<uint8_t>& out, GgufType type) { Put<uint32_t>(out, uint32_t(type)); }

template <typename T>
std::vector<uint8_t> EncodeScalar(GgufType type, T value) {
  std::vector<uint8_t> out;
  PutType(out, type);
  Put<T>(out, value);
  return out;
}

template <typename T>
std::vector<uint8_t> EncodeArray(GgufType elem_type, const std::vector<T>& values) {
  std::vector<uint8_t> out;
  PutType(out, GgufType::kArray);
  PutType(out, elem_type);
  Put<uint64_t>(out, values.size());
  const size_t at = out.size();
  out.resize(at + values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(out.data() + at, values.data(), values.size() * sizeof(T));
  return out;
}

// Bytes of one element of a numeric array, for CopyValue.
size_t ElementBytes(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      break;
  }
  PETREL_CHECK(false && "not a numeric GGUF type");
  return 0;
}

uint64_t AlignUp(uint64_t offset, uint64_t alignment) {
  return (offset + alignment - 1) / alignment * alignment;
}

// Collects the whole file in memory (tests).
class MemorySink {
 public:
  explicit MemorySink(std::vector<uint8_t>& out) : out_(out) {}
  void Write(const void* bytes, size_t n) {
    const uint8_t* begin = static_cast<const uint8_t*>(bytes);
    out_.insert(out_.end(), begin, begin + n);
  }
  void WriteZeros(size_t n) { out_.resize(out_.size() + n, 0); }
  // The tensor is filled in place at the end of the output.
  void* BeginChunk(size_t n) {
    out_.resize(out_.size() + n, 0);
    return out_.data() + out_.size() - n;
  }
  void EndChunk(size_t) {}
  bool ok() const { return true; }

 private:
  std::vector<uint8_t>& out_;
};

// Streams to an AtomicFile; one buffer, sized for the largest tensor, is reused for every tensor.
class FileSink {
 public:
  explicit FileSink(AtomicFile& file) : file_(file) {}
  void Write(const void* bytes, size_t n) { file_.Write(bytes, n); }
  void WriteZeros(size_t n) {
    static const uint8_t kZeros[256] = {};
    while (n > 0) {
      const size_t step = n < sizeof(kZeros) ? n : sizeof(kZeros);
      Write(kZeros, step);
      n -= step;
    }
  }
  void* BeginChunk(size_t n) {
    if (buffer_.size() < n) buffer_.resize(n);
    return buffer_.data();
  }
  void EndChunk(size_t n) { Write(buffer_.data(), n); }
  bool ok() const { return file_.ok(); }

 private:
  AtomicFile& file_;
  std::vector<uint8_t> buffer_;
};

}  // namespace

void GgufWriter::SetEncoded(const std::string& key, std::vector<uint8_t> encoded) {
  PETREL_CHECK(!key.empty());
  // A u32 `general.alignment` set directly also moves the tensor offsets; any other type is kept
  // as given, so tests can write files that a reader must reject.
  if (key == "general.alignment" && encoded.size() == 8 &&
      encoded[0] == uint8_t(GgufType::kUint32)) {
    uint32_t alignment = 0;
    std::memcpy(&alignment, encoded.data() + 4, 4);
    if (alignment != 0 && std::has_single_bit(alignment)) alignment_ = alignment;
  }
  for (Entry& entry : entries_) {
    if (entry.key == key) {
      entry.encoded = std::move(encoded);
      return;
    }
  }
  entries_.push_back(Entry{key, std::move(encoded)});
}

void GgufWriter::SetU8(const std::string& key, uint8_t v) {
  SetEncoded(key, EncodeScalar(GgufType::kUint8, v));
}
void GgufWriter::SetI8(const std::string& key, int8_t v) {
  SetEncoded(key, EncodeScalar(GgufType::kInt8, v));
}
void GgufWriter::SetU16(const std::string& key, uint16_t v) {
  SetEncoded(key, EncodeScalar(GgufType::kUint16, v));
}
void GgufWriter::SetI16(const std::string& key, int16_t v) {
  SetEncoded(key, EncodeScalar(GgufType::kInt16, v));
}
void GgufWriter::SetU32(const std::string& key, uint32_t v) {
  SetEncoded(key, EncodeScalar(GgufType::kUint32, v));
}
void GgufWriter::SetI32(const std::string& key, int32_t v) {
  SetEncoded(key, EncodeScalar(GgufType::kInt32, v));
}
void GgufWriter::SetU64(const std::string& key, uint64_t v) {
  SetEncoded(key, EncodeScalar(GgufType::kUint64, v));
}
void GgufWriter::SetI64(const std::string& key, int64_t v) {
  SetEncoded(key, EncodeScalar(GgufType::kInt64, v));
}
void GgufWriter::SetF32(const std::string& key, float v) {
  SetEncoded(key, EncodeScalar(GgufType::kFloat32, v));
}
void GgufWriter::SetF64(const std::string& key, double v) {
  SetEncoded(key, EncodeScalar(GgufType::kFloat64, v));
}
void GgufWriter::SetBool(const std::string& key, bool v) {
  SetEncoded(key, EncodeScalar(GgufType::kBool, uint8_t(v ? 1 : 0)));
}

void GgufWriter::SetString(const std::string& key, const std::string& v) {
  std::vector<uint8_t> out;
  PutType(out, GgufType::kString);
  PutString(out, v);
  SetEncoded(key, std::move(out));
}

void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& v) {
  std::vector<uint8_t> out;
  PutType(out, GgufType::kArray);
  PutType(out, GgufType::kString);
  Put<uint64_t>(out, v.size());
  for (const std::string& s : v) PutString(out, s);
  SetEncoded(key, std::move(out));
}

void GgufWriter::SetF32Array(const std::string& key, const std::vector<float>& v) {
  SetEncoded(key, EncodeArray(GgufType::kFloat32, v));
}

void GgufWriter::SetI32Array(const std::string& key, const std::vector<int32_t>& v) {
  SetEncoded(key, EncodeArray(GgufType::kInt32, v));
}

void GgufWriter::CopyValue(const std::string& key, const GgufValue& value) {
  std::vector<uint8_t> out;
  PutType(out, value.type);
  switch (value.type) {
    case GgufType::kUint8:
    case GgufType::kBool:
      Put<uint8_t>(out, uint8_t(value.u64));
      break;
    case GgufType::kInt8:
      Put<int8_t>(out, int8_t(value.i64));
      break;
    case GgufType::kUint16:
      Put<uint16_t>(out, uint16_t(value.u64));
      break;
    case GgufType::kInt16:
      Put<int16_t>(out, int16_t(value.i64));
      break;
    case GgufType::kUint32:
      Put<uint32_t>(out, uint32_t(value.u64));
      break;
    case GgufType::kInt32:
      Put<int32_t>(out, int32_t(value.i64));
      break;
    case GgufType::kUint64:
      Put<uint64_t>(out, value.u64);
      break;
    case GgufType::kInt64:
      Put<int64_t>(out, value.i64);
      break;
    case GgufType::kFloat32:
      Put<float>(out, float(value.f64));
      break;
    case GgufType::kFloat64:
      Put<double>(out, value.f64);
      break;
    case GgufType::kString:
      PutString(out, value.str);
      break;
    case GgufType::kArray:
      PutType(out, value.elem_type);
      Put<uint64_t>(out, value.count);
      if (value.elem_type == GgufType::kString) {
        PETREL_CHECK(value.strings.size() == value.count);
        for (std::string_view s : value.strings) PutString(out, s);
      } else {
        const size_t n_bytes = size_t(value.count) * ElementBytes(value.elem_type);
        if (n_bytes > 0) out.insert(out.end(), value.elems, value.elems + n_bytes);
      }
      break;
  }
  SetEncoded(key, std::move(out));
}

void GgufWriter::AddTensor(const std::string& name, const TensorDesc& desc, FillFn fill) {
  PETREL_CHECK(!name.empty());
  PETREL_CHECK(desc.n_dims >= 1 && desc.n_dims <= kMaxDims);
  PETREL_CHECK(desc.ne[0] % Traits(desc.dtype).block_elems == 0);
  tensors_.push_back(PendingTensor{name, desc, std::move(fill)});
}

void GgufWriter::SetAlignment(uint32_t alignment) {
  PETREL_CHECK(alignment != 0 && std::has_single_bit(alignment));
  SetU32("general.alignment", alignment);
}

void GgufWriter::SetVersion(uint32_t version) {
  PETREL_CHECK(version == 2 || version == 3);
  version_ = version;
}

template <typename Sink>
void GgufWriter::Emit(Sink& sink) const {
  std::vector<uint8_t> head;
  head.insert(head.end(), {'G', 'G', 'U', 'F'});
  Put<uint32_t>(head, version_);
  Put<uint64_t>(head, tensors_.size());
  Put<uint64_t>(head, entries_.size());
  for (const Entry& entry : entries_) {
    PutString(head, entry.key);
    head.insert(head.end(), entry.encoded.begin(), entry.encoded.end());
  }
  uint64_t data_bytes = 0;
  for (const PendingTensor& tensor : tensors_) {
    PutString(head, tensor.name);
    Put<uint32_t>(head, uint32_t(tensor.desc.n_dims));
    for (int d = 0; d < tensor.desc.n_dims; ++d) Put<uint64_t>(head, uint64_t(tensor.desc.ne[d]));
    Put<uint32_t>(head, Traits(tensor.desc.dtype).ggml_id);
    Put<uint64_t>(head, data_bytes);
    data_bytes = AlignUp(data_bytes + tensor.desc.bytes(), alignment_);
  }
  head.resize(AlignUp(head.size(), alignment_), 0);
  sink.Write(head.data(), head.size());
  uint64_t bytes_total = 0, bytes_done = 0;
  for (const PendingTensor& tensor : tensors_) bytes_total += tensor.desc.bytes();
  // After a failed write (disk full) the remaining tensors are not computed: the file is lost.
  for (size_t i = 0; i < tensors_.size() && sink.ok(); ++i) {
    const PendingTensor& tensor = tensors_[i];
    const size_t n_bytes = tensor.desc.bytes();
    void* dst = sink.BeginChunk(n_bytes);
    if (tensor.fill) tensor.fill(dst);
    sink.EndChunk(n_bytes);
    sink.WriteZeros(AlignUp(n_bytes, alignment_) - n_bytes);
    bytes_done += n_bytes;
    if (progress_) progress_(i + 1, tensors_.size(), bytes_done, bytes_total);
  }
}

Status GgufWriter::Write(const std::string& path) const {
  PETREL_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(path));
  FileSink sink(file);
  Emit(sink);
  return file.Commit();
}

std::vector<uint8_t> GgufWriter::WriteToMemory() const {
  std::vector<uint8_t> out;
  MemorySink sink(out);
  Emit(sink);
  return out;
}

}  // namespace petrel
