// Session file layout (little-endian), version 2: "PTRLSESS", u32 version, u32 n_layers,
// u32 row_bytes, u32 kv dtype, u64 model header hash, u64 model data hash, u64 n_tokens,
// u64 metadata bytes, u64 model path bytes, the model path, metadata, tokens (i32), then per
// layer the K rows and the V rows of positions [0, n_tokens).
#include "core/generation/session_file.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/format/atomic_file.h"

namespace petrel {
namespace {

constexpr char kMagic[8] = {'P', 'T', 'R', 'L', 'S', 'E', 'S', 'S'};
// 2: the model fingerprint and path. Version 1 files name no model, so they are refused.
constexpr uint32_t kVersion = 2;
constexpr uint64_t kMaxModelPathBytes = 1 << 16;
constexpr size_t kSampleBytes = 4096;

struct Header {
  char magic[8];
  uint32_t version, n_layers, row_bytes, dtype;
  uint64_t header_hash, data_hash;
  uint64_t n_tokens, metadata_bytes, model_path_bytes;
};
static_assert(sizeof(Header) == 64, "the header is written as it is laid out in memory");

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

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

// The model's path as it reads from anywhere, for messages in a later run.
std::string ModelPath(const LoadedModel& model) {
  std::error_code ignored;
  const std::filesystem::path absolute = std::filesystem::absolute(model.source, ignored);
  return absolute.empty() ? model.source : absolute.lexically_normal().string();
}

}  // namespace

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

Status SaveSession(Engine& engine, SeqId seq, const std::vector<int32_t>& tokens,
                   const std::string& metadata, const std::string& path) {
  if (tokens.size() != engine.SequenceLength(seq)) {
    return Error("session: %zu tokens given but the cache holds %zu", tokens.size(),
                 engine.SequenceLength(seq));
  }
  PETREL_RETURN_IF_ERROR(CheckOutputIsNotInput(path, {engine.model().source}));
  const ModelFingerprint fingerprint = FingerprintModel(engine.model());
  const std::string model_path = ModelPath(engine.model());
  PETREL_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(path));
  Header header;
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kVersion;
  header.n_layers = uint32_t(engine.kv_layers());
  header.row_bytes = uint32_t(engine.kv_row_bytes());
  header.dtype = uint32_t(engine.kv_type());
  header.header_hash = fingerprint.header_hash;
  header.data_hash = fingerprint.data_hash;
  header.n_tokens = tokens.size();
  header.metadata_bytes = metadata.size();
  header.model_path_bytes = model_path.size();
  file.Write(&header, sizeof(header));
  file.Write(model_path.data(), model_path.size());
  file.Write(metadata.data(), metadata.size());
  file.Write(tokens.data(), tokens.size() * sizeof(int32_t));
  std::vector<uint8_t> k(tokens.size() * engine.kv_row_bytes()), v(k.size());
  for (size_t layer = 0; layer < engine.kv_layers() && file.ok(); ++layer) {
    PETREL_RETURN_IF_ERROR(engine.ReadSequenceKv(seq, layer, k.data(), v.data()));
    file.Write(k.data(), k.size());
    file.Write(v.data(), v.size());
  }
  return file.Commit();
}

Result<LoadedSession> LoadSession(Engine& engine, SeqId seq, const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) return Error("%s: cannot open", path.c_str());
  std::fseek(file.get(), 0, SEEK_END);
  const long file_size = std::ftell(file.get());
  std::fseek(file.get(), 0, SEEK_SET);
  // Magic and version first: older versions have shorter headers.
  Header header;
  const size_t prefix_bytes = sizeof(header.magic) + sizeof(header.version);
  if (file_size < long(prefix_bytes) || std::fread(&header, prefix_bytes, 1, file.get()) != 1) {
    return Error("%s: too short for a session header", path.c_str());
  }
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0)
    return Error("%s: not a petrel session file (bad magic)", path.c_str());
  if (header.version < kVersion) {
    return Error(
        "%s: session format version %u comes from an older petrel and names no model; this one "
        "reads version %u (save the session again)",
        path.c_str(), header.version, kVersion);
  }
  if (header.version != kVersion) {
    return Error("%s: session format version %u is newer than this petrel reads (%u)", path.c_str(),
                 header.version, kVersion);
  }
  if (file_size < long(sizeof(header)) ||
      std::fread(reinterpret_cast<char*>(&header) + prefix_bytes, sizeof(header) - prefix_bytes, 1,
                 file.get()) != 1) {
    return Error("%s: too short for a session header", path.c_str());
  }
  if (header.model_path_bytes > kMaxModelPathBytes ||
      header.model_path_bytes > uint64_t(file_size)) {
    return Error("%s: model path of %llu bytes is not plausible", path.c_str(),
                 (unsigned long long)header.model_path_bytes);
  }
  std::string saved_model(header.model_path_bytes, '\0');
  if (std::fread(saved_model.data(), 1, saved_model.size(), file.get()) != saved_model.size()) {
    return Error("%s: truncated", path.c_str());
  }
  const ModelFingerprint fingerprint = FingerprintModel(engine.model());
  const std::string current_model = ModelPath(engine.model());
  if (header.header_hash != fingerprint.header_hash || header.data_hash != fingerprint.data_hash) {
    if (saved_model == current_model) {
      return Error(
          "%s: saved with the model %s as it was then; that file's weights have changed since",
          path.c_str(), saved_model.c_str());
    }
    return Error("%s: saved with the model %s, not with the current model %s", path.c_str(),
                 saved_model.c_str(), current_model.c_str());
  }
  if (header.dtype != uint32_t(engine.kv_type())) {
    const char* saved_type =
        header.dtype < uint32_t(DType::kCount) ? DTypeName(DType(header.dtype)) : "unknown";
    return Error("%s: saved with a %s KV cache, but this one is %s (--cache-type)", path.c_str(),
                 saved_type, DTypeName(engine.kv_type()));
  }
  if (header.n_layers != engine.kv_layers() || header.row_bytes != engine.kv_row_bytes()) {
    return Error("%s: %u layers x %u bytes per K/V row do not match the cache (%zu x %zu)",
                 path.c_str(), header.n_layers, header.row_bytes, engine.kv_layers(),
                 engine.kv_row_bytes());
  }
  if (header.n_tokens > engine.context()) {
    return Error("%s: %llu tokens exceed the context of %zu", path.c_str(),
                 (unsigned long long)header.n_tokens, engine.context());
  }
  const uint64_t rows_bytes = 2ull * header.n_layers * header.n_tokens * header.row_bytes;
  const uint64_t expected = sizeof(header) + header.model_path_bytes + header.metadata_bytes +
                            header.n_tokens * 4 + rows_bytes;
  if (header.metadata_bytes > uint64_t(file_size) || expected != uint64_t(file_size)) {
    return Error("%s: size %ld does not match its header (expected %llu)", path.c_str(), file_size,
                 (unsigned long long)expected);
  }
  LoadedSession session;
  session.metadata.resize(header.metadata_bytes);
  session.tokens.resize(header.n_tokens);
  if (std::fread(session.metadata.data(), 1, session.metadata.size(), file.get()) !=
          session.metadata.size() ||
      std::fread(session.tokens.data(), 4, session.tokens.size(), file.get()) !=
          session.tokens.size()) {
    return Error("%s: truncated", path.c_str());
  }
  for (int32_t token : session.tokens) {
    if (token < 0 || token >= engine.config().n_vocab)
      return Error("%s: token id %d is outside the vocabulary", path.c_str(), token);
  }
  PETREL_RETURN_IF_ERROR(engine.ResizeSequenceKv(seq, session.tokens.size()));
  std::vector<uint8_t> k(session.tokens.size() * engine.kv_row_bytes()), v(k.size());
  for (size_t layer = 0; layer < engine.kv_layers(); ++layer) {
    if (std::fread(k.data(), 1, k.size(), file.get()) != k.size() ||
        std::fread(v.data(), 1, v.size(), file.get()) != v.size()) {
      (void)engine.TruncateSequence(seq, 0);
      return Error("%s: truncated in layer %zu", path.c_str(), layer);
    }
    PETREL_RETURN_IF_ERROR(engine.WriteSequenceKv(seq, layer, k.data(), v.data()));
  }
  return session;
}

}  // namespace petrel
