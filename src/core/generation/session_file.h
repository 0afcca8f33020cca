// Session files: a sequence's tokens and its K/V rows (plus caller metadata such as the chat
// messages), so a conversation can be saved and resumed without recomputing the prompt.
#pragma once

#include <string>
#include <vector>

#include "core/runtime/engine.h"

namespace petrel {

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

// Writes `seq`'s tokens (`tokens` must be what its cache holds), K/V rows, the model's
// fingerprint and path. `path` must not be the model's file; on error it is left as it was.
Status SaveSession(Engine& engine, SeqId seq, const std::vector<int32_t>& tokens,
                   const std::string& metadata, const std::string& path);

struct LoadedSession {
  std::vector<int32_t> tokens;
  std::string metadata;
};

// Replaces `seq`'s cache with the file's. The file must come from the same model (fingerprint)
// and cache type; every size is checked before anything is read into memory sized by it.
// Files of an older session format are rejected (their K/V rows cannot be checked).
Result<LoadedSession> LoadSession(Engine& engine, SeqId seq, const std::string& path);

}  // namespace petrel
