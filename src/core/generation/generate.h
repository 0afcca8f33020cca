// The generation loop for one sequence: prefill a prompt, then sample one token at a time until
// a stop: an end-of-generation token, a stop string (matched on text across tokens), the token
// limit, the context, or the caller. A single Sequence run through RunSequences.
#pragma once

#include <cstdint>
#include <vector>

#include "core/generation/sequence.h"  // GenerateOptions, GenerateResult, TokenCallback
#include "core/runtime/engine.h"

namespace petrel {

class Speculator;

// Continues `seq` with `prompt` (which may be only the part not already in its KV cache) and
// generates, with speculative decoding when `speculator` is given (speculative.h). Needs the
// engine's tokenizer for text; without one, text stays empty.
Result<GenerateResult> Generate(Engine& engine, SeqId seq, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options, const TokenCallback& on_token,
                                Speculator* speculator = nullptr);

}  // namespace petrel
