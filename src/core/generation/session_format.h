// The session file's layout, the model fingerprint it carries, and its reader. The reader
// checks a file against a SessionTarget (the model's fingerprint and the KV cache's shape)
// given as data, so it needs no engine: LoadSession (session_file.h) gives it the engine's, and
// the fuzz target a loaded model's.
//
// Layout (little-endian), version 2: SessionHeader (64 bytes), the model path, the metadata,
// the tokens (i32), then per layer the K rows and the V rows of positions [0, n_tokens).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace petrel {

struct LoadedModel;

// What identifies a model's weights for a session file. `header_hash` covers the architecture,
// every hyperparameter and each weight's name, shape and type; `data_hash` covers the first,
// middle and last 4 KiB of each weight's bytes. Sampled rather than complete so that /save and
// /load cost milliseconds on any model (a full hash reads every byte: seconds for gigabytes);
// a retrained or converted model differs in every sampled block.
struct ModelFingerprint {
  uint64_t header_hash = 0;
  uint64_t data_hash = 0;
  bool operator==(const ModelFingerprint&) const = default;
};
ModelFingerprint FingerprintModel(const LoadedModel& model);

// The model's path as it reads from anywhere, for messages in a later run.
std::string SessionModelPath(const LoadedModel& model);

inline constexpr char kSessionMagic[8] = {'P', 'T', 'R', 'L', 'S', 'E', 'S', 'S'};
// 2: the model fingerprint and path. Version 1 files name no model, so they are refused.
inline constexpr uint32_t kSessionVersion = 2;

struct SessionHeader {
  char magic[8];
  uint32_t version, n_layers, row_bytes, dtype;
  uint64_t header_hash, data_hash;
  uint64_t n_tokens, metadata_bytes, model_path_bytes;
};
static_assert(sizeof(SessionHeader) == 64, "the header is written as it is laid out in memory");

// What a session file must match to be loaded: the model and the cache it goes into.
struct SessionTarget {
  ModelFingerprint fingerprint;
  std::string model_path;  // SessionModelPath of the current model, for messages
  uint32_t kv_type = 0;    // DType of the cache
  uint32_t n_layers = 0;   // cache layers
  uint32_t row_bytes = 0;  // bytes of one position's K (or V) row in one layer
  uint64_t context = 0;    // tokens a sequence may hold
  int64_t n_vocab = 0;     // token ids must lie in [0, n_vocab)
};

class SessionReader {
 public:
  // Reads the header, the metadata and the tokens and checks them against `target`: every size
  // is checked against the file's before anything is read into memory sized by it, and the
  // file's size must be exactly what the header describes. Errors name the file.
  static Result<SessionReader> Open(const std::string& path, const SessionTarget& target);

  std::vector<int32_t>& tokens() { return tokens_; }
  std::string& metadata() { return metadata_; }
  // The next layer's K and V rows, tokens().size() × row_bytes bytes each.
  Status ReadLayer(size_t layer, uint8_t* k, uint8_t* v);

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::string path_;
  size_t layer_bytes_ = 0;
  std::vector<int32_t> tokens_;
  std::string metadata_;
};

}  // namespace petrel
