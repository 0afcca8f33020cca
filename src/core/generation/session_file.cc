// Saving a sequence's cache into a session file and loading it back (session_file.h); the
// layout and its checks are session_format.h's.
#include "core/generation/session_file.h"

#include <cstring>
#include <vector>

#include "core/format/atomic_file.h"

namespace petrel {

Status SaveSession(Engine& engine, SeqId seq, const std::vector<int32_t>& tokens,
                   const std::string& metadata, const std::string& path) {
  if (tokens.size() != engine.SequenceLength(seq)) {
    return Error("session: %zu tokens given but the cache holds %zu", tokens.size(),
                 engine.SequenceLength(seq));
  }
  PETREL_RETURN_IF_ERROR(CheckOutputIsNotInput(path, {engine.model().source}));
  const ModelFingerprint fingerprint = FingerprintModel(engine.model());
  const std::string model_path = SessionModelPath(engine.model());
  PETREL_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(path));
  SessionHeader header;
  std::memcpy(header.magic, kSessionMagic, sizeof(kSessionMagic));
  header.version = kSessionVersion;
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
  SessionTarget target;
  target.fingerprint = FingerprintModel(engine.model());
  target.model_path = SessionModelPath(engine.model());
  target.kv_type = uint32_t(engine.kv_type());
  target.n_layers = uint32_t(engine.kv_layers());
  target.row_bytes = uint32_t(engine.kv_row_bytes());
  target.context = engine.context();
  target.n_vocab = engine.config().n_vocab;
  PETREL_ASSIGN_OR_RETURN(SessionReader reader, SessionReader::Open(path, target));
  LoadedSession session{std::move(reader.tokens()), std::move(reader.metadata())};
  PETREL_RETURN_IF_ERROR(engine.ResizeSequenceKv(seq, session.tokens.size()));
  std::vector<uint8_t> k(session.tokens.size() * engine.kv_row_bytes()), v(k.size());
  for (size_t layer = 0; layer < engine.kv_layers(); ++layer) {
    if (Status read = reader.ReadLayer(layer, k.data(), v.data()); !read.ok()) {
      (void)engine.TruncateSequence(seq, 0);
      return read;
    }
    PETREL_RETURN_IF_ERROR(engine.WriteSequenceKv(seq, layer, k.data(), v.data()));
  }
  return session;
}
}  // namespace petrel
