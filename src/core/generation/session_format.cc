// The session file's reader and the model fingerprint it carries (session_format.h).
#include "core/generation/session_format.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/model/architecture.h"  // GgufWeightName
#include "core/model/loader.h"        // LoadedModel

namespace petrel {
namespace {

constexpr uint64_t kMaxModelPathBytes = 1 << 16;
constexpr size_t kSampleBytes = 4096;

// FNV-1a, 64-bit: enough to tell models apart (this guards against mistakes, not attacks).
class Hasher {
 public:
  void Bytes(const void* data, size_t n) {
    const uint8_t* bytes = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) hash_ = (hash_ ^ bytes[i]) * 0x100000001b3ull;
  }
  template <typename T>
  void Value(T value) {
    Bytes(&value, sizeof(value));
  }
  void Text(const std::string& text) {
    Value<uint64_t>(text.size());
    Bytes(text.data(), text.size());
  }
  uint64_t hash() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

void HashWeight(const std::string& name, const TensorView& view, Hasher* header, Hasher* data) {
  if (view.data == nullptr) return;
  header->Text(name);
  header->Value<int32_t>(view.desc.n_dims);
  for (int d = 0; d < view.desc.n_dims; ++d) header->Value<int64_t>(view.desc.ne[d]);
  header->Text(DTypeName(view.desc.dtype));
  const size_t n_bytes = view.desc.bytes();
  const uint8_t* bytes = static_cast<const uint8_t*>(view.data);
  const size_t sample = std::min(n_bytes, kSampleBytes);
  data->Bytes(bytes, sample);                           // first
  data->Bytes(bytes + (n_bytes - sample) / 2, sample);  // middle
  data->Bytes(bytes + n_bytes - sample, sample);        // last
}

}  // namespace

std::string SessionModelPath(const LoadedModel& model) {
  std::error_code ignored;
  const std::filesystem::path absolute = std::filesystem::absolute(model.source, ignored);
  return absolute.empty() ? model.source : absolute.lexically_normal().string();
}

ModelFingerprint FingerprintModel(const LoadedModel& model) {
  Hasher header, data;
  const ModelConfig& c = model.config;
  header.Text(c.architecture);
  for (int64_t value : {c.n_vocab, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim,
                        c.ffn_dim, c.max_context, c.sliding_window}) {
    header.Value(value);
  }
  header.Value(c.norm_eps);
  header.Value(c.rope.base);
  header.Value(c.rope.dims);
  header.Value(uint32_t(c.rope.style));
  header.Value(uint32_t(c.rope.scaling));
  for (float value : {c.rope.factor, c.rope.low_freq_factor, c.rope.high_freq_factor})
    header.Value(value);
  header.Value(c.rope.original_context);
  header.Value<uint64_t>(c.rope.freq_factors.size());
  header.Bytes(c.rope.freq_factors.data(), c.rope.freq_factors.size() * sizeof(float));
  for (bool flag : {c.tied_embeddings, c.qkv_bias, c.output_proj_bias}) header.Value<uint8_t>(flag);
  // Variants that change the cached K/V rows of the same tensors; hashed only when set, so the
  // fingerprints of models without them are unchanged.
  if (!c.nope_layers.empty()) header.Bytes(c.nope_layers.data(), c.nope_layers.size());
  if (c.residual_scale != 1.0f) header.Value(c.residual_scale);
  if (c.norms_after_sublayers) header.Value<uint8_t>(1);
  const Architecture& arch = *model.arch;
  const ModelWeights& w = model.weights;
  HashWeight(GgufWeightName(arch.token_embd, -1), w.token_embd, &header, &data);
  HashWeight(GgufWeightName(arch.output_norm, -1), w.output_norm, &header, &data);
  if (!c.tied_embeddings) HashWeight(GgufWeightName(arch.output, -1), w.output, &header, &data);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& layer = w.layers[l];
    for (size_t i = 0; i < layer.size(); ++i)
      HashWeight(GgufWeightName(layer.spec(i), int(l)), layer[i], &header, &data);
  }
  return ModelFingerprint{header.hash(), data.hash()};
}

Result<SessionReader> SessionReader::Open(const std::string& path, const SessionTarget& target) {
  SessionReader reader;
  reader.path_ = path;
  reader.file_.reset(std::fopen(path.c_str(), "rb"));
  std::FILE* file = reader.file_.get();
  if (!file) return Error("%s: cannot open", path.c_str());
  std::fseek(file, 0, SEEK_END);
  const long file_size = std::ftell(file);
  std::fseek(file, 0, SEEK_SET);
  if (file_size < 0) return Error("%s: cannot tell its size", path.c_str());
  // Magic and version first: older versions have shorter headers.
  SessionHeader header;
  const size_t prefix_bytes = sizeof(header.magic) + sizeof(header.version);
  if (file_size < long(prefix_bytes) || std::fread(&header, prefix_bytes, 1, file) != 1) {
    return Error("%s: too short for a session header", path.c_str());
  }
  if (std::memcmp(header.magic, kSessionMagic, sizeof(kSessionMagic)) != 0)
    return Error("%s: not a petrel session file (bad magic)", path.c_str());
  if (header.version < kSessionVersion) {
    return Error(
        "%s: session format version %u comes from an older petrel and names no model; this one "
        "reads version %u (save the session again)",
        path.c_str(), header.version, kSessionVersion);
  }
  if (header.version != kSessionVersion) {
    return Error("%s: session format version %u is newer than this petrel reads (%u)", path.c_str(),
                 header.version, kSessionVersion);
  }
  if (file_size < long(sizeof(header)) ||
      std::fread(reinterpret_cast<char*>(&header) + prefix_bytes, sizeof(header) - prefix_bytes, 1,
                 file) != 1) {
    return Error("%s: too short for a session header", path.c_str());
  }
  if (header.model_path_bytes > kMaxModelPathBytes ||
      header.model_path_bytes > uint64_t(file_size)) {
    return Error("%s: model path of %llu bytes is not plausible", path.c_str(),
                 (unsigned long long)header.model_path_bytes);
  }
  std::string saved_model(header.model_path_bytes, '\0');
  if (std::fread(saved_model.data(), 1, saved_model.size(), file) != saved_model.size()) {
    return Error("%s: truncated", path.c_str());
  }
  if (header.header_hash != target.fingerprint.header_hash ||
      header.data_hash != target.fingerprint.data_hash) {
    if (saved_model == target.model_path) {
      return Error(
          "%s: saved with the model %s as it was then; that file's weights have changed since",
          path.c_str(), saved_model.c_str());
    }
    return Error("%s: saved with the model %s, not with the current model %s", path.c_str(),
                 saved_model.c_str(), target.model_path.c_str());
  }
  if (header.dtype != target.kv_type) {
    const char* saved_type =
        header.dtype < uint32_t(DType::kCount) ? DTypeName(DType(header.dtype)) : "unknown";
    const char* cache_type =
        target.kv_type < uint32_t(DType::kCount) ? DTypeName(DType(target.kv_type)) : "unknown";
    return Error("%s: saved with a %s KV cache, but this one is %s (--cache-type)", path.c_str(),
                 saved_type, cache_type);
  }
  if (header.n_layers != target.n_layers || header.row_bytes != target.row_bytes) {
    return Error("%s: %u layers x %u bytes per K/V row do not match the cache (%u x %u)",
                 path.c_str(), header.n_layers, header.row_bytes, target.n_layers,
                 target.row_bytes);
  }
  if (header.n_tokens > target.context) {
    return Error("%s: %llu tokens exceed the context of %llu", path.c_str(),
                 (unsigned long long)header.n_tokens, (unsigned long long)target.context);
  }
  // Each term is bounded (the context, the cache's shape, the file's size), so the sum cannot
  // wrap.
  const uint64_t rows_bytes = 2ull * header.n_layers * header.n_tokens * header.row_bytes;
  if (header.metadata_bytes > uint64_t(file_size)) {
    return Error("%s: metadata of %llu bytes is longer than the file", path.c_str(),
                 (unsigned long long)header.metadata_bytes);
  }
  const uint64_t expected = sizeof(header) + header.model_path_bytes + header.metadata_bytes +
                            header.n_tokens * 4 + rows_bytes;
  if (expected != uint64_t(file_size)) {
    return Error("%s: size %ld does not match its header (expected %llu)", path.c_str(), file_size,
                 (unsigned long long)expected);
  }
  reader.metadata_.resize(header.metadata_bytes);
  reader.tokens_.resize(header.n_tokens);
  if (std::fread(reader.metadata_.data(), 1, reader.metadata_.size(), file) !=
          reader.metadata_.size() ||
      std::fread(reader.tokens_.data(), 4, reader.tokens_.size(), file) != reader.tokens_.size()) {
    return Error("%s: truncated", path.c_str());
  }
  for (int32_t token : reader.tokens_) {
    if (token < 0 || token >= target.n_vocab)
      return Error("%s: token id %d is outside the vocabulary", path.c_str(), token);
  }
  reader.layer_bytes_ = reader.tokens_.size() * size_t(header.row_bytes);
  return reader;
}

Status SessionReader::ReadLayer(size_t layer, uint8_t* k, uint8_t* v) {
  if (std::fread(k, 1, layer_bytes_, file_.get()) != layer_bytes_ ||
      std::fread(v, 1, layer_bytes_, file_.get()) != layer_bytes_) {
    return Error("%s: truncated in layer %zu", path_.c_str(), layer);
  }
  return Status();
}

}  // namespace petrel
