// Session files: a sequence's tokens and its K/V rows (plus caller metadata such as the chat
// messages), so a conversation can be saved and resumed without recomputing the prompt.
#pragma once

#include <string>
#include <vector>

#include "core/generation/session_format.h"  // ModelFingerprint, SessionReader
#include "core/runtime/engine.h"

namespace petrel {

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
