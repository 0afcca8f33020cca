// Generate(): prompt in chunks, then single-token decode steps with the sampler.
#include "core/generate.h"

#include <chrono>

#include "core/tokenizer/tokenizer.h"

namespace petrel {

Result<GenerateResult> Generate(Engine& engine, SeqId seq, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options,
                                const std::function<bool(int32_t)>& on_token) {
  using Clock = std::chrono::steady_clock;
  GenerateResult result;
  result.prompt_tokens = prompt.size();
  if (prompt.empty()) return Error("the prompt has no tokens");
  const size_t n_vocab = size_t(engine.config().n_vocab);
  std::vector<float> logits;
  const auto prompt_start = Clock::now();
  PETREL_RETURN_IF_ERROR(engine.Prefill(seq, prompt, /*all_logits=*/false, &logits));
  result.prompt_seconds = std::chrono::duration<double>(Clock::now() - prompt_start).count();

  Sampler sampler(options.sampling);
  const Tokenizer* tokenizer = engine.tokenizer();
  const auto gen_start = Clock::now();
  result.stop_reason = "length";
  Batch batch;
  for (size_t step = 0; step < options.max_new_tokens; ++step) {
    const int32_t token = sampler.Sample(logits.data() + logits.size() - n_vocab, n_vocab);
    result.new_ids.push_back(token);
    const bool end =
        options.stop_at_end_of_generation && tokenizer && tokenizer->IsEndOfGeneration(token);
    if (end) {
      result.stop_reason = "eos";
      break;
    }
    if (on_token && !on_token(token)) {
      result.stop_reason = "callback";
      break;
    }
    if (step + 1 == options.max_new_tokens) break;
    const size_t position = engine.kv_cache().Length(seq);
    if (position >= engine.kv_cache().context()) {
      result.stop_reason = "context";
      break;
    }
    batch.Clear();
    batch.Add(token, int32_t(position), seq, true);
    PETREL_RETURN_IF_ERROR(engine.Decode(batch, &logits));
  }
  result.generate_seconds = std::chrono::duration<double>(Clock::now() - gen_start).count();
  return result;
}

}  // namespace petrel
