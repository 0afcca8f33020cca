// Reading and writing importance matrices in llama.cpp's GGUF and legacy .dat layouts.
#include "core/eval/imatrix_file.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/format/atomic_file.h"
#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"

namespace petrel {
namespace {

constexpr const char kSum2Suffix[] = ".in_sum2";
constexpr const char kCountsSuffix[] = ".counts";
// A legacy entry name longer than this is not a weight name: the file is damaged.
constexpr int32_t kMaxNameBytes = 4096;

bool EndsWith(const std::string& text, const char* suffix, std::string* stem) {
  const size_t n = std::strlen(suffix);
  if (text.size() <= n || text.compare(text.size() - n, n, suffix) != 0) return false;
  *stem = text.substr(0, text.size() - n);
  return true;
}

// The checks every entry passes whichever layout it came from.
Status CheckEntry(const std::string& path, const std::string& name, const ImatrixEntry& entry) {
  const std::string shown = EscapeForMessage(name);
  if (entry.counts.empty() || entry.n_in <= 0 ||
      entry.sum2.size() != entry.counts.size() * size_t(entry.n_in)) {
    return Error("%s: imatrix entry '%s' has %zu sums for %zu counts: damaged file", path.c_str(),
                 shown.c_str(), entry.sum2.size(), entry.counts.size());
  }
  for (float count : entry.counts) {
    if (!std::isfinite(count) || count <= 0) {
      return Error("%s: imatrix entry '%s' has a count of %g: damaged file (or no data for it)",
                   path.c_str(), shown.c_str(), double(count));
    }
  }
  for (float sum : entry.sum2) {
    if (!std::isfinite(sum) || sum < 0) {
      return Error("%s: imatrix entry '%s' has a sum of squares of %g: damaged file", path.c_str(),
                   shown.c_str(), double(sum));
    }
  }
  // The importance quantization weighs columns by is sum / count (ImatrixEntry::Importance): a
  // count so small that the quotient overflows would make every weight of the matrix infinite.
  for (size_t mat = 0; mat < entry.counts.size(); ++mat) {
    for (int64_t j = 0; j < entry.n_in; ++j) {
      const float sum = entry.sum2[mat * size_t(entry.n_in) + size_t(j)];
      if (!std::isfinite(sum / entry.counts[mat])) {
        return Error("%s: imatrix entry '%s' has a sum of %g over a count of %g: damaged file",
                     path.c_str(), shown.c_str(), double(sum), double(entry.counts[mat]));
      }
    }
  }
  return Status::Ok();
}

Result<Imatrix> ReadGguf(const std::string& path) {
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  Imatrix imatrix;
  if (const GgufValue* type = file->Find("general.type");
      type && type->type == GgufType::kString && type->str != "imatrix") {
    return Error("%s: a GGUF file of type '%s', not an importance matrix", path.c_str(),
                 EscapeForMessage(type->str).c_str());
  }
  if (const GgufValue* datasets = file->Find("imatrix.datasets"); datasets) {
    for (std::string_view dataset : datasets->strings) imatrix.datasets.emplace_back(dataset);
  }
  PETREL_ASSIGN_OR_RETURN(uint64_t chunk_count, file->GetUintOr("imatrix.chunk_count", 0));
  PETREL_ASSIGN_OR_RETURN(uint64_t chunk_size, file->GetUintOr("imatrix.chunk_size", 0));
  imatrix.chunk_count = uint32_t(std::min<uint64_t>(chunk_count, UINT32_MAX));
  imatrix.chunk_size = uint32_t(std::min<uint64_t>(chunk_size, UINT32_MAX));
  std::map<std::string, std::pair<const GgufTensorInfo*, const GgufTensorInfo*>> pairs;
  for (const GgufTensorInfo& info : file->tensors()) {
    std::string stem;
    if (EndsWith(info.name, kSum2Suffix, &stem)) {
      pairs[stem].first = &info;
    } else if (EndsWith(info.name, kCountsSuffix, &stem)) {
      pairs[stem].second = &info;
    }  // `.in_sum` and anything else: not needed to quantize
  }
  for (const auto& [name, pair] : pairs) {
    const auto [sum2, counts] = pair;
    const std::string shown = EscapeForMessage(name);
    if (!sum2 || !counts) {
      return Error("%s: imatrix entry '%s' has %s but no %s tensor: damaged file", path.c_str(),
                   shown.c_str(), sum2 ? "sums" : "counts", sum2 ? "counts" : "sums");
    }
    if (sum2->desc.dtype != DType::kF32 || counts->desc.dtype != DType::kF32) {
      return Error("%s: imatrix entry '%s' is not stored as F32: damaged file", path.c_str(),
                   shown.c_str());
    }
    const int64_t n_mat = sum2->desc.n_rows();
    if (counts->desc.n_elems() != n_mat) {
      return Error("%s: imatrix entry '%s' has %lld counts for %lld matrices: damaged file",
                   path.c_str(), shown.c_str(), static_cast<long long>(counts->desc.n_elems()),
                   static_cast<long long>(n_mat));
    }
    ImatrixEntry entry;
    entry.n_in = sum2->desc.ne[0];
    entry.sum2.resize(size_t(sum2->desc.n_elems()));
    entry.counts.resize(size_t(n_mat));
    std::memcpy(entry.sum2.data(), sum2->data, entry.sum2.size() * sizeof(float));
    std::memcpy(entry.counts.data(), counts->data, entry.counts.size() * sizeof(float));
    PETREL_RETURN_IF_ERROR(CheckEntry(path, name, entry));
    imatrix.entries.emplace(name, std::move(entry));
  }
  if (imatrix.entries.empty())
    return Error("%s: an importance matrix with no entries", path.c_str());
  return imatrix;
}

// Bounds-checked little-endian reads over the whole legacy file.
class Cursor {
 public:
  explicit Cursor(const std::string& bytes) : bytes_(bytes) {}
  bool Read(void* out, size_t n) {
    if (n > bytes_.size() - pos_) return false;
    std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t left() const { return bytes_.size() - pos_; }

 private:
  const std::string& bytes_;
  size_t pos_ = 0;
};

Result<Imatrix> ReadDat(const std::string& path, const std::string& bytes) {
  Cursor in(bytes);
  auto truncated = [&](const char* what) {
    return Error("%s: truncated importance matrix (at %s)", path.c_str(), what);
  };
  int32_t n_entries = 0;
  if (!in.Read(&n_entries, 4)) return truncated("the entry count");
  // Each entry takes at least 16 bytes (length, one name byte, ncall, nval, one value).
  if (n_entries < 1) {
    return Error("%s: not an importance matrix (%d entries)", path.c_str(), n_entries);
  }
  if (size_t(n_entries) > in.left() / 16) {
    return Error("%s: truncated importance matrix, or not one (%d entries in %zu bytes)",
                 path.c_str(), n_entries, bytes.size());
  }
  Imatrix imatrix;
  for (int32_t i = 0; i < n_entries; ++i) {
    int32_t name_len = 0, ncall = 0, nval = 0;
    if (!in.Read(&name_len, 4)) return truncated("an entry's name");
    if (name_len < 1 || name_len > kMaxNameBytes) {
      return Error("%s: entry %d has a name of %d bytes: damaged file", path.c_str(), i + 1,
                   name_len);
    }
    std::string name(size_t(name_len), '\0');
    if (!in.Read(name.data(), name.size())) return truncated("an entry's name");
    if (!in.Read(&ncall, 4) || !in.Read(&nval, 4)) return truncated("an entry's sizes");
    if (nval < 1 || size_t(nval) > in.left() / 4) {
      return Error("%s: imatrix entry '%s' claims %d values: damaged or truncated file",
                   path.c_str(), EscapeForMessage(name).c_str(), nval);
    }
    ImatrixEntry entry;
    entry.n_in = nval;
    entry.sum2.resize(size_t(nval));
    in.Read(entry.sum2.data(), entry.sum2.size() * sizeof(float));
    entry.counts = {float(ncall)};
    PETREL_RETURN_IF_ERROR(CheckEntry(path, name, entry));
    if (!imatrix.entries.emplace(name, std::move(entry)).second) {
      return Error("%s: imatrix entry '%s' appears twice: damaged file", path.c_str(),
                   EscapeForMessage(name).c_str());
    }
  }
  // The trailer is optional (older files end after the entries).
  int32_t chunk_count = 0, dataset_len = 0;
  if (in.Read(&chunk_count, 4) && chunk_count > 0) imatrix.chunk_count = uint32_t(chunk_count);
  if (in.Read(&dataset_len, 4) && dataset_len > 0 && size_t(dataset_len) <= in.left()) {
    std::string dataset(size_t(dataset_len), '\0');
    in.Read(dataset.data(), dataset.size());
    imatrix.datasets.push_back(std::move(dataset));
  }
  return imatrix;
}

Status WriteGguf(const Imatrix& imatrix, const std::string& path) {
  GgufWriter writer;
  writer.SetString("general.type", "imatrix");
  writer.SetStringArray("imatrix.datasets", imatrix.datasets);
  writer.SetU32("imatrix.chunk_count", imatrix.chunk_count);
  writer.SetU32("imatrix.chunk_size", imatrix.chunk_size);
  for (const auto& [name, entry] : imatrix.entries) {  // a std::map: sorted, as llama.cpp writes
    const ImatrixEntry* e = &entry;
    const int64_t n_mat = int64_t(entry.n_mat());
    writer.AddTensor(name + kSum2Suffix, TensorDesc::Make(DType::kF32, {entry.n_in, n_mat}),
                     [e](void* dst) { std::memcpy(dst, e->sum2.data(), e->sum2.size() * 4); });
    writer.AddTensor(name + kCountsSuffix, TensorDesc::Make(DType::kF32, {1, n_mat}),
                     [e](void* dst) { std::memcpy(dst, e->counts.data(), e->counts.size() * 4); });
  }
  return writer.Write(path);
}

Status WriteDat(const Imatrix& imatrix, const std::string& path) {
  PETREL_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(path));
  auto put_i32 = [&](int32_t v) { file.Write(&v, 4); };
  const float chunk = float(std::max<uint32_t>(imatrix.chunk_size, 1));
  put_i32(int32_t(imatrix.entries.size()));
  for (const auto& [name, entry] : imatrix.entries) {
    put_i32(int32_t(name.size()));
    file.Write(name.data(), name.size());
    // The legacy layout has one call count per entry: the chunks the most-used matrix saw.
    float max_count = 0;
    for (float count : entry.counts) max_count = std::max(max_count, count);
    const int32_t ncall = std::max(1, int32_t(std::ceil(max_count / chunk)));
    put_i32(ncall);
    put_i32(int32_t(entry.sum2.size()));
    std::vector<float> values(entry.sum2.size());
    for (size_t j = 0; j < values.size(); ++j) {
      const float count = entry.counts[j / size_t(entry.n_in)];
      values[j] = count > 0 ? entry.sum2[j] / count * float(ncall) : 1.0f;
    }
    file.Write(values.data(), values.size() * sizeof(float));
  }
  put_i32(int32_t(imatrix.chunk_count));
  const std::string dataset = imatrix.datasets.empty() ? "" : imatrix.datasets.back();
  put_i32(int32_t(dataset.size()));
  file.Write(dataset.data(), dataset.size());
  return file.Commit();
}

}  // namespace

std::vector<float> ImatrixEntry::Importance(size_t mat) const {
  std::vector<float> importance(static_cast<size_t>(n_in));
  const float count = counts[mat];
  for (size_t j = 0; j < importance.size(); ++j) {
    importance[j] = sum2[mat * size_t(n_in) + j] / count;
  }
  return importance;
}

Status WriteImatrix(const Imatrix& imatrix, const std::string& path, ImatrixFormat format) {
  switch (format) {
    case ImatrixFormat::kGguf:
      return WriteGguf(imatrix, path);
    case ImatrixFormat::kDat:
      return WriteDat(imatrix, path);
  }
  return Error("unknown imatrix format");
}

Result<Imatrix> ReadImatrix(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) return Error("%s: cannot open for reading", path.c_str());
  char magic[4] = {};
  stream.read(magic, 4);
  if (stream.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) return ReadGguf(path);
  stream.clear();
  stream.seekg(0);
  std::string bytes((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
  if (stream.bad()) return Error("%s: read failed", path.c_str());
  return ReadDat(path, bytes);
}

}  // namespace petrel
