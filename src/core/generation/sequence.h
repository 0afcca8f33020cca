// A generation request as a state machine: its sampler chain, streaming detokenizer, stop
// matcher, limits and result; it says what to feed next and consumes the logits of each step,
// so that many sequences can be stepped together through Engine::Step.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/generation/sampling/sampler.h"
#include "core/generation/stop_matcher.h"
#include "core/runtime/engine.h"

namespace petrel {

class GrammarMatcher;
class StreamDecoder;
class Tokenizer;

struct GenerateOptions {
  size_t max_new_tokens = 64;
  size_t min_new_tokens = 0;      // end-of-generation tokens are banned before this many
  bool ignore_eos = false;        // ban end-of-generation tokens altogether
  std::vector<std::string> stop;  // stop strings; the matched one is not part of the text
  SamplingParams sampling;
  bool skip_special = true;  // leave special tokens out of the text
  size_t context = 0;        // tokens the sequence may hold, prompt included; 0: the engine's
  // Context shift: when the next token would not fit the context, drop the oldest
  // (context - keep) / 2 tokens after the first `keep` and recompute the rest (see Sequence).
  // Off, the sequence stops there with reason "context".
  bool context_shift = false;
  // Tokens at the start of the engine sequence that a shift never drops, counted from position
  // 0: a BOS token is one of them (the `petrel` command adds it to its --keep). At most the
  // context; a shift needs keep + 2 <= context, else the sequence stops with "context".
  size_t keep = 0;
};

struct GeneratedToken {
  int32_t id;
  float logprob;
  std::vector<TokenLogprob> top;
};

struct GenerateResult {
  std::vector<int32_t> new_ids;  // includes the end-of-generation token when it stopped there
  std::vector<GeneratedToken> tokens;
  std::string text;          // what was emitted: stop strings and held-back text excluded
  std::string stop_reason;   // "eos", "stop", "length", "context", "cancelled" ("error": Sequence)
  std::string stop_string;   // for "stop"
  size_t prompt_tokens = 0;  // fed to the model in this call
  double prompt_seconds = 0.0;
  double generate_seconds = 0.0;
  size_t context_shifts = 0;   // times the context was shifted (GenerateOptions::context_shift)
  double shift_seconds = 0.0;  // spent recomputing after shifts (part of generate_seconds)
  // Forward passes that sampled tokens: one per token in plain decoding, fewer when
  // speculative decoding (speculative.h) keeps several tokens of one pass.
  size_t target_passes = 0;
  size_t draft_tokens = 0;    // speculative decoding: drafted tokens verified
  size_t draft_accepted = 0;  // of them, those that stood
};

// Called with each token and the text it releases (possibly empty); return false to stop.
using TokenCallback = std::function<bool(const GeneratedToken& token, std::string_view text)>;

class Sequence {
 public:
  // Continues engine sequence `seq` (not owned; it must live until this finishes) with
  // `prompt`, which may be only the part its cache does not hold yet. `cached` names the tokens
  // the cache already holds (empty, or all SequenceLength(seq) of them): a context shift must
  // recompute those past `keep`, so without them a shift that would keep any stops the
  // sequence with reason "context" instead. Fails on bad sampling parameters, an empty prompt,
  // one that does not fit the context, a `keep` past the context or a wrong `cached`. Needs
  // the engine's tokenizer for text and end-of-generation tokens; without one, text stays
  // empty.
  static Result<std::unique_ptr<Sequence>> Create(Engine& engine, SeqId seq,
                                                  std::vector<int32_t> prompt,
                                                  const GenerateOptions& options,
                                                  TokenCallback on_token = nullptr,
                                                  std::span<const int32_t> cached = {});
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;
  ~Sequence();

  SeqId seq() const { return seq_; }
  bool finished() const { return finished_; }
  // Prompt tokens, or after a context shift the tokens to recompute, remain to be fed (the
  // next input is a chunk of them, not one sampled token).
  bool prefilling() const { return input_fed_ < input_.size(); }

  // The input of this sequence's next step: the next at most `max_tokens` prompt tokens (with
  // logits wanted on the last chunk), or the token sampled last. Its tokens stay valid until
  // Consume(). Empty once finished.
  StepInput NextInput(size_t max_tokens);
  // Takes the outcome of the step that fed the last NextInput(): advances through the prompt,
  // or samples a token from the logits, detokenizes it, matches stop strings, calls the token
  // callback and decides whether the sequence is finished. A failed step finishes it with
  // reason "error" (status() says why); its engine sequence is then as before that step.
  void Consume(const StepOutput& output);
  // Finishes now with reason "cancelled", releasing text held back for stop strings.
  void Cancel();
  // Finishes now with reason "error" and `status` (a failure outside a step, for example of a
  // draft source).
  void Abort(Status status);

  // Speculative decoding (speculative.h). True while tokens are sampled one per step: the next
  // input is last_token(), which a drafted continuation may follow.
  bool sampling() const { return generating_ && !finished_ && !prefilling(); }
  int32_t last_token() const { return last_token_; }
  // How many drafted tokens a step may feed after last_token(): what the context and the token
  // limit leave (a draft longer than the tokens still to sample is wasted work).
  size_t DraftRoom() const;
  // Takes the outcome of a pass that fed last_token() and then `draft` (with `draft_probs` as
  // in Draft::probs) to the engine sequence, with `logits` holding the n_vocab logits of each of
  // those 1 + draft.size() positions. Samples the positions in order, each with its drafted
  // token as the proposal (SamplerChain::SampleDraft), up to the first rejection, whose
  // position yields the resampled token (after a fully accepted draft, the last position
  // yields one more token); truncates the engine sequence to the tokens that stand; and emits
  // the sampled tokens as Consume() does, finishing where it would. Returns how many drafted
  // tokens stood.
  size_t ConsumeDraft(std::span<const float> logits, std::span<const int32_t> draft,
                      std::span<const float> draft_probs);
  // Preemption: the engine sequence this ran on was freed between steps; go on in `seq`, which
  // holds a prefix of held() (for example whole blocks from the prefix cache). The rest of
  // held(), then what remained to be fed, is fed again as a prompt chunk (recompute), after
  // which sampling goes on where it stopped. Fails, changing nothing, on a finished sequence or
  // when `seq` holds more than held() or tokens past it are unknown.
  Status Resume(SeqId seq);

  const std::vector<int32_t>& prompt() const { return prompt_; }
  // The tokens the engine sequence holds, in order (after a failed step too): what the cache
  // held at Create (-1 for each one `cached` did not name), the prompt and the generated
  // tokens fed so far, less what context shifts dropped.
  const std::vector<int32_t>& held() const { return held_; }
  const GenerateResult& result() const { return result_; }
  GenerateResult TakeResult() { return std::move(result_); }
  // OK unless it finished with reason "error".
  const Status& status() const { return status_; }

 private:
  using Clock = std::chrono::steady_clock;
  Sequence(Engine& engine, SeqId seq, std::vector<int32_t> prompt, const GenerateOptions& options,
           TokenCallback on_token);
  void Sample(std::span<const float> logits);
  // The logits of the step that samples new token number `step`, end tokens banned while
  // min_new_tokens or ignore_eos say so (in masked_).
  const float* MaskedRow(const float* logits, size_t step);
  // Records a sampled token and emits its text; finishes on an end token, a stop string, the
  // callback or the token limit. `last`: the token is to be fed next (not yet in the cache),
  // so it needs room in the context.
  void Emit(const SampleResult& sample, bool last);
  // Makes room for the sampled token `last_token_`: drops tokens after `keep` and sets up the
  // rest, then that token, to be fed again. False when it cannot (see Create).
  bool ShiftContext();
  void Finish(const char* reason);
  void Fail(Status status);

  Engine& engine_;
  const Tokenizer* tokenizer_;
  SeqId seq_;
  const GenerateOptions options_;
  const TokenCallback on_token_;
  const size_t n_vocab_;
  size_t context_ = 0;  // tokens the engine sequence may hold
  std::unique_ptr<SamplerChain> sampler_;
  // With a grammar (options.sampling.grammar): its parse state, shared with the sampler stage
  // that masks and advances it; the sequence asks it whether the text is complete.
  std::shared_ptr<GrammarMatcher> grammar_;
  std::unique_ptr<StreamDecoder> decoder_;  // with a tokenizer only
  StopMatcher stops_;
  std::vector<int32_t> end_tokens_;  // end-of-generation ids, banned while min/ignore apply
  std::vector<float> masked_;        // (n_vocab) logits with end tokens banned
  std::vector<int32_t> prompt_;
  std::vector<int32_t> held_;       // the engine sequence's tokens (capacity: the context)
  std::vector<int32_t> recompute_;  // what a shift feeds again (capacity: the context)
  // The tokens being fed as chunks (the prompt, or recompute_ after a shift), and how many of
  // them the engine sequence holds.
  std::span<const int32_t> input_;
  size_t input_fed_ = 0;
  size_t pending_ = 0;  // tokens of the input handed out by NextInput()
  int32_t last_token_ = -1;
  bool generating_ = false;  // the prompt is in and tokens are being sampled
  bool finished_ = false;
  Clock::time_point prompt_start_, generate_start_, shift_start_;
  GenerateResult result_;
  Status status_;
  std::vector<SampleResult> drafted_;  // ConsumeDraft's sampled tokens (scratch)
};

// Steps every unfinished sequence together through Engine::Step until all have finished. Each
// step feeds every sampling sequence its last token, then fills the rest of the engine's batch
// (max_batch_tokens) with prompt chunks in order. Every failure is one sequence's own: it
// finishes with reason "error" and its status(), and the others go on.
void RunSequences(Engine& engine, std::span<Sequence* const> sequences);

}  // namespace petrel
