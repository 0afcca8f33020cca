// Generate(): prompt in chunks, then single-token decode steps through the sampler chain, the
// streaming detokenizer and the stop matcher.
#include "core/generation/generate.h"

#include <chrono>
#include <cmath>

#include "core/generation/stop_matcher.h"
#include "core/tokenizer/tokenizer.h"

namespace petrel {

Result<GenerateResult> Generate(Engine& engine, SeqId seq, const std::vector<int32_t>& prompt,
                                const GenerateOptions& options, const TokenCallback& on_token) {
  using Clock = std::chrono::steady_clock;
  GenerateResult result;
  result.prompt_tokens = prompt.size();
  if (prompt.empty()) return Error("the prompt has no tokens");
  const size_t n_vocab = size_t(engine.config().n_vocab);
  const Tokenizer* tokenizer = engine.tokenizer();
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<SamplerChain> sampler, SamplerChain::Create(options.sampling));
  for (const auto& [token, bias] : options.sampling.logit_bias) {
    if (size_t(token) >= n_vocab) return Error("logit_bias: token id %d is outside the vocabulary of %zu", token, n_vocab);
  }
  std::vector<int32_t> end_tokens;  // end-of-generation ids, banned while min/ignore apply
  if (tokenizer) {
    sampler->SetTokenText([tokenizer](int32_t id) { return tokenizer->TokenText(id); });
    for (size_t id = 0; id < std::min(n_vocab, tokenizer->n_vocab()); ++id) {
      if (tokenizer->IsEndOfGeneration(int32_t(id))) end_tokens.push_back(int32_t(id));
    }
  }
  sampler->AddHistory(prompt);

  std::vector<float> logits;
  const auto prompt_start = Clock::now();
  PETREL_RETURN_IF_ERROR(engine.Prefill(seq, prompt, /*all_logits=*/false, &logits));
  result.prompt_seconds = std::chrono::duration<double>(Clock::now() - prompt_start).count();

  std::unique_ptr<StreamDecoder> decoder;
  if (tokenizer) decoder = std::make_unique<StreamDecoder>(*tokenizer, options.skip_special);
  StopMatcher stops(options.stop);
  const auto gen_start = Clock::now();
  result.stop_reason = "length";
  Batch batch;
  for (size_t step = 0; step < options.max_new_tokens; ++step) {
    float* row = logits.data() + logits.size() - n_vocab;
    if (options.ignore_eos || step < options.min_new_tokens) {
      for (int32_t id : end_tokens) row[id] = -INFINITY;
    }
    const SampleResult sample = sampler->Sample(row, n_vocab);
    const GeneratedToken token{sample.id, sample.logprob, sample.top};
    result.new_ids.push_back(token.id);
    result.tokens.push_back(token);
    if (tokenizer && !options.ignore_eos && tokenizer->IsEndOfGeneration(token.id)) {
      result.stop_reason = "eos";
      break;
    }
    std::string piece = decoder ? stops.Push(decoder->Push(token.id)) : std::string();
    result.text += piece;
    const bool keep_going = !on_token || on_token(token, piece);
    if (stops.matched()) {
      result.stop_reason = "stop";
      result.stop_string = stops.matched_stop();
      break;
    }
    if (!keep_going) {
      result.stop_reason = "cancelled";
      break;
    }
    if (step + 1 == options.max_new_tokens) break;
    const size_t position = engine.kv_cache().Length(seq);
    if (position >= engine.kv_cache().context()) {
      result.stop_reason = "context";
      break;
    }
    batch.Clear();
    batch.Add(token.id, int32_t(position), seq, true);
    PETREL_RETURN_IF_ERROR(engine.Decode(batch, &logits));
  }
  if (result.stop_reason != "stop" && decoder) {
    std::string tail = stops.Push(decoder->Flush());
    tail += stops.Flush();
    result.text += tail;
    if (on_token && !tail.empty()) on_token(GeneratedToken{-1, 0.0f, {}}, tail);
  }
  result.generate_seconds = std::chrono::duration<double>(Clock::now() - gen_start).count();
  return result;
}

}  // namespace petrel
