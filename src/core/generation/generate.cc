// Generate(): one Sequence stepped to its end; a failed step is the call's error.
#include "core/generation/generate.h"

#include "core/generation/speculative.h"

namespace petrel {

Result<GenerateResult> Generate(Engine& engine, SeqId seq, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options, const TokenCallback& on_token,
                                Speculator* speculator) {
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> sequence,
                          Sequence::Create(engine, seq, prompt, options, on_token));
  RunSpeculative(engine, *sequence, speculator);
  if (!sequence->status().ok()) return sequence->status();
  return sequence->TakeResult();
}

}  // namespace petrel
