// Session file layout (little-endian): "PTRLSESS", u32 version, u32 n_layers, u32 row_bytes,
// u32 kv dtype, u64 n_tokens, u64 metadata bytes, metadata, tokens (i32), then per layer the K
// rows and the V rows of positions [0, n_tokens).
#include "core/generation/session_file.h"

#include <cstdio>
#include <cstring>
#include <memory>

namespace petrel {
namespace {

constexpr char kMagic[8] = {'P', 'T', 'R', 'L', 'S', 'E', 'S', 'S'};
constexpr uint32_t kVersion = 1;

struct Header {
  char magic[8];
  uint32_t version, n_layers, row_bytes, dtype;
  uint64_t n_tokens, metadata_bytes;
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

Status SaveSession(Engine& engine, SeqId seq, const std::vector<int32_t>& tokens,
                   const std::string& metadata, const std::string& path) {
  if (tokens.size() != engine.SequenceLength(seq)) {
    return Error("session: %zu tokens given but the cache holds %zu", tokens.size(),
                 engine.SequenceLength(seq));
  }
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "wb"));
  if (!file) return Error("%s: cannot open for writing", path.c_str());
  Header header;
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kVersion;
  header.n_layers = uint32_t(engine.kv_layers());
  header.row_bytes = uint32_t(engine.kv_row_bytes());
  header.dtype = uint32_t(engine.kv_type());
  header.n_tokens = tokens.size();
  header.metadata_bytes = metadata.size();
  bool ok = std::fwrite(&header, sizeof(header), 1, file.get()) == 1;
  ok = ok && std::fwrite(metadata.data(), 1, metadata.size(), file.get()) == metadata.size();
  ok = ok && std::fwrite(tokens.data(), sizeof(int32_t), tokens.size(), file.get()) == tokens.size();
  std::vector<uint8_t> k(tokens.size() * engine.kv_row_bytes()), v(k.size());
  for (size_t layer = 0; ok && layer < engine.kv_layers(); ++layer) {
    PETREL_RETURN_IF_ERROR(engine.ReadSequenceKv(seq, layer, k.data(), v.data()));
    ok = std::fwrite(k.data(), 1, k.size(), file.get()) == k.size() &&
         std::fwrite(v.data(), 1, v.size(), file.get()) == v.size();
  }
  if (!ok) return Error("%s: write failed", path.c_str());
  return Status::Ok();
}

Result<LoadedSession> LoadSession(Engine& engine, SeqId seq, const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) return Error("%s: cannot open", path.c_str());
  std::fseek(file.get(), 0, SEEK_END);
  const long file_size = std::ftell(file.get());
  std::fseek(file.get(), 0, SEEK_SET);
  Header header;
  if (file_size < long(sizeof(header)) || std::fread(&header, sizeof(header), 1, file.get()) != 1) {
    return Error("%s: too short for a session header", path.c_str());
  }
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) return Error("%s: not a petrel session file (bad magic)", path.c_str());
  if (header.version != kVersion) return Error("%s: session version %u is not supported", path.c_str(), header.version);
  if (header.n_layers != engine.kv_layers() || header.row_bytes != engine.kv_row_bytes() ||
      header.dtype != uint32_t(engine.kv_type())) {
    return Error("%s: saved for a different model or cache type (%u layers x %u bytes per row)", path.c_str(),
                 header.n_layers, header.row_bytes);
  }
  if (header.n_tokens > engine.context()) {
    return Error("%s: %llu tokens exceed the context of %zu", path.c_str(), (unsigned long long)header.n_tokens, engine.context());
  }
  const uint64_t rows_bytes = 2ull * header.n_layers * header.n_tokens * header.row_bytes;
  const uint64_t expected = sizeof(header) + header.metadata_bytes + header.n_tokens * 4 + rows_bytes;
  if (header.metadata_bytes > uint64_t(file_size) || expected != uint64_t(file_size)) {
    return Error("%s: size %ld does not match its header (expected %llu)", path.c_str(), file_size, (unsigned long long)expected);
  }
  LoadedSession session;
  session.metadata.resize(header.metadata_bytes);
  session.tokens.resize(header.n_tokens);
  if (std::fread(session.metadata.data(), 1, session.metadata.size(), file.get()) != session.metadata.size() ||
      std::fread(session.tokens.data(), 4, session.tokens.size(), file.get()) != session.tokens.size()) {
    return Error("%s: truncated", path.c_str());
  }
  for (int32_t token : session.tokens) {
    if (token < 0 || token >= engine.config().n_vocab) return Error("%s: token id %d is outside the vocabulary", path.c_str(), token);
  }
  PETREL_RETURN_IF_ERROR(engine.ResizeSequenceKv(seq, session.tokens.size()));
  std::vector<uint8_t> k(session.tokens.size() * engine.kv_row_bytes()), v(k.size());
  for (size_t layer = 0; layer < engine.kv_layers(); ++layer) {
    if (std::fread(k.data(), 1, k.size(), file.get()) != k.size() || std::fread(v.data(), 1, v.size(), file.get()) != v.size()) {
      (void)engine.TruncateSequence(seq, 0);
      return Error("%s: truncated in layer %zu", path.c_str(), layer);
    }
    PETREL_RETURN_IF_ERROR(engine.WriteSequenceKv(seq, layer, k.data(), v.data()));
  }
  return session;
}

}  // namespace petrel
