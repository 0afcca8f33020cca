// Sequence: prompt chunks, then one sampled token per step through the sampler chain, the
// streaming detokenizer and the stop matcher; RunSequences steps many of them together.
#include "core/generation/sequence.h"

#include <algorithm>
#include <cmath>

#include "core/generation/grammar_constraint.h"
#include "core/tokenizer/tokenizer.h"

namespace petrel {

Sequence::Sequence(Engine& engine, SeqId seq, std::vector<int32_t> prompt,
                   const GenerateOptions& options, TokenCallback on_token)
    : engine_(engine),
      tokenizer_(engine.tokenizer()),
      seq_(seq),
      options_(options),
      on_token_(std::move(on_token)),
      n_vocab_(size_t(engine.config().n_vocab)),
      stops_(options.stop),
      prompt_(std::move(prompt)) {}

Sequence::~Sequence() = default;

Result<std::unique_ptr<Sequence>> Sequence::Create(Engine& engine, SeqId seq,
                                                   std::vector<int32_t> prompt,
                                                   const GenerateOptions& options,
                                                   TokenCallback on_token,
                                                   std::span<const int32_t> cached) {
  if (prompt.empty()) return Error("the prompt has no tokens");
  std::unique_ptr<Sequence> sequence(
      new Sequence(engine, seq, std::move(prompt), options, std::move(on_token)));
  Sequence& s = *sequence;
  PETREL_ASSIGN_OR_RETURN(s.sampler_, SamplerChain::Create(options.sampling));
  for (const auto& [token, bias] : options.sampling.logit_bias) {
    if (size_t(token) >= s.n_vocab_) {
      return Error("logit_bias: token id %d is outside the vocabulary of %zu", token, s.n_vocab_);
    }
  }
  if (!engine.HasSequence(seq)) return Error("sequence %d does not exist", seq);
  s.context_ = options.context ? std::min(options.context, engine.context()) : engine.context();
  const size_t held = engine.SequenceLength(seq) + s.prompt_.size();
  if (held > s.context_) {
    return Error("sequence %d: %zu tokens exceed the context of %zu", seq, held, s.context_);
  }
  if (options.keep > s.context_) {
    return Error("sequence %d: keep %zu exceeds the context of %zu", seq, options.keep, s.context_);
  }
  const size_t length = engine.SequenceLength(seq);
  if (!cached.empty() && cached.size() != length) {
    return Error("sequence %d holds %zu tokens, but %zu cached tokens were named", seq, length,
                 cached.size());
  }
  // Reserved here so that neither decoding nor a shift allocates.
  s.held_.reserve(s.context_);
  if (cached.empty()) {
    s.held_.assign(length, -1);
  } else {
    s.held_.assign(cached.begin(), cached.end());
  }
  if (options.context_shift) s.recompute_.reserve(s.context_);
  s.input_ = s.prompt_;
  if (s.tokenizer_) {
    const Tokenizer* tokenizer = s.tokenizer_;
    s.sampler_->SetTokenText([tokenizer](int32_t id) { return tokenizer->TokenText(id); });
    for (size_t id = 0; id < std::min(s.n_vocab_, tokenizer->n_vocab()); ++id) {
      if (tokenizer->IsEndOfGeneration(int32_t(id))) s.end_tokens_.push_back(int32_t(id));
    }
    s.decoder_ = std::make_unique<StreamDecoder>(*tokenizer, options.skip_special);
  }
  if (!options.sampling.grammar.empty()) {
    if (!s.tokenizer_) return Error("a grammar needs the model's tokenizer");
    PETREL_ASSIGN_OR_RETURN(
        s.grammar_, CompileGrammarConstraint(options.sampling.grammar, *s.tokenizer_, s.n_vocab_));
    s.sampler_->SetConstraint(MakeGrammarStage(s.grammar_));
  }
  if (!s.end_tokens_.empty() && (options.ignore_eos || options.min_new_tokens > 0)) {
    s.masked_.resize(s.n_vocab_);
  }
  s.sampler_->AddHistory(s.prompt_);
  s.result_.prompt_tokens = s.prompt_.size();
  s.result_.stop_reason = "length";
  const size_t expected = std::min(options.max_new_tokens, s.context_);
  s.result_.new_ids.reserve(expected);
  s.result_.tokens.reserve(expected);
  return sequence;
}

StepInput Sequence::NextInput(size_t max_tokens) {
  pending_ = 0;
  if (finished_ || max_tokens == 0) return StepInput{seq_, {}, false};
  if (prefilling()) {
    if (!generating_ && input_fed_ == 0) prompt_start_ = Clock::now();
    pending_ = std::min(max_tokens, input_.size() - input_fed_);
    const bool last = input_fed_ + pending_ == input_.size();
    return StepInput{seq_, input_.subspan(input_fed_, pending_), last};
  }
  pending_ = 1;
  return StepInput{seq_, std::span<const int32_t>(&last_token_, 1), true};
}

void Sequence::Consume(const StepOutput& output) {
  if (finished_ || pending_ == 0) return;
  if (!output.status.ok()) {
    Fail(output.status);
    return;
  }
  if (prefilling()) {
    const std::span<const int32_t> fed = input_.subspan(input_fed_, pending_);
    held_.insert(held_.end(), fed.begin(), fed.end());
    input_fed_ += pending_;
    pending_ = 0;
    if (prefilling()) return;
    if (generating_) {  // the recomputation after a shift is done
      result_.shift_seconds += std::chrono::duration<double>(Clock::now() - shift_start_).count();
    } else {
      result_.prompt_seconds =
          std::chrono::duration<double>(Clock::now() - prompt_start_).count();
      generate_start_ = Clock::now();
      generating_ = true;
    }
  } else {
    held_.push_back(last_token_);
  }
  pending_ = 0;
  ++result_.target_passes;
  if (output.logits.size() != n_vocab_) {
    Fail(Error("sequence %d: the step returned %zu logits instead of %zu", seq_,
               output.logits.size(), n_vocab_));
    return;
  }
  Sample(output.logits);
}

const float* Sequence::MaskedRow(const float* logits, size_t step) {
  if (masked_.empty() || !(options_.ignore_eos || step < options_.min_new_tokens)) return logits;
  std::copy(logits, logits + n_vocab_, masked_.begin());
  for (int32_t id : end_tokens_) masked_[size_t(id)] = -INFINITY;
  return masked_.data();
}

void Sequence::Sample(std::span<const float> logits) {
  const size_t step = result_.new_ids.size();
  if (step >= options_.max_new_tokens) {
    Finish("length");
    return;
  }
  // A grammar that is complete and admits nothing more ends the text as its end token would.
  if (grammar_ && !grammar_->CanContinue()) {
    Finish("eos");
    return;
  }
  const SampleResult sample = sampler_->Sample(MaskedRow(logits.data(), step), n_vocab_);
  if (grammar_ && !grammar_->error().ok()) {
    Fail(grammar_->error());
    return;
  }
  Emit(sample, /*last=*/true);
}

void Sequence::Emit(const SampleResult& sample, bool last) {
  const size_t step = result_.new_ids.size();
  result_.new_ids.push_back(sample.id);
  result_.tokens.push_back(GeneratedToken{sample.id, sample.logprob, sample.top});
  const GeneratedToken& token = result_.tokens.back();
  if (tokenizer_ && !options_.ignore_eos && tokenizer_->IsEndOfGeneration(token.id)) {
    Finish("eos");
    return;
  }
  const std::string piece = decoder_ ? stops_.Push(decoder_->Push(token.id)) : std::string();
  result_.text += piece;
  const bool keep_going = !on_token_ || on_token_(token, piece);
  if (stops_.matched()) {
    result_.stop_string = stops_.matched_stop();
    Finish("stop");
    return;
  }
  if (!keep_going) {
    Finish("cancelled");
    return;
  }
  if (step + 1 == options_.max_new_tokens) {
    Finish("length");
    return;
  }
  last_token_ = token.id;
  if (!last) return;  // a drafted token that stood: the cache holds it already
  // The cache holds every token but this one; feeding it must leave room for it.
  if (engine_.SequenceLength(seq_) >= context_ && !(options_.context_shift && ShiftContext())) {
    Finish("context");
  }
}

size_t Sequence::DraftRoom() const {
  // A grammar's matcher advances with each sampled token and cannot step back over rejected
  // drafts, so a constrained sequence decodes one token per pass.
  if (!sampling() || grammar_) return 0;
  const size_t length = engine_.SequenceLength(seq_);
  const size_t context_room = length + 1 < context_ ? context_ - length - 1 : 0;
  const size_t step = result_.new_ids.size();
  const size_t to_sample = step < options_.max_new_tokens ? options_.max_new_tokens - step : 0;
  return std::min(context_room, to_sample > 0 ? to_sample - 1 : 0);
}

size_t Sequence::ConsumeDraft(std::span<const float> logits, std::span<const int32_t> draft,
                              std::span<const float> draft_probs) {
  if (!sampling()) return 0;
  const size_t n = draft.size();
  const size_t length = engine_.SequenceLength(seq_);  // held_, the last token and the draft
  if (logits.size() != (n + 1) * n_vocab_ || length != held_.size() + n + 1 ||
      (!draft_probs.empty() && draft_probs.size() != n * n_vocab_)) {
    Fail(Error("sequence %d: a verification pass of %zu drafted tokens returned %zu logits", seq_,
               n, logits.size()));
    return 0;
  }
  ++result_.target_passes;
  // Choose first: the positions after a rejection are not sampled, so the sampler's history
  // and generator advance exactly as for the tokens that stand.
  drafted_.clear();
  size_t accepted = 0;
  const size_t first_step = result_.new_ids.size();
  for (size_t i = 0; i <= n; ++i) {
    const size_t step = first_step + i;
    if (step >= options_.max_new_tokens) break;
    const float* row = MaskedRow(logits.data() + i * n_vocab_, step);
    if (i == n) {
      drafted_.push_back(sampler_->Sample(row, n_vocab_));
      break;
    }
    bool stood = false;
    const std::span<const float> probs =
        draft_probs.empty() ? draft_probs : draft_probs.subspan(i * n_vocab_, n_vocab_);
    drafted_.push_back(sampler_->SampleDraft(row, n_vocab_, draft[i], probs, &stood));
    if (!stood) break;
    ++accepted;
  }
  result_.draft_tokens += n;
  result_.draft_accepted += accepted;
  // The cache keeps the last token and the drafted tokens that stood; the rest of the pass's
  // K/V goes with the truncation (whole blocks back to the free list, no copy).
  held_.push_back(last_token_);
  held_.insert(held_.end(), draft.begin(), draft.begin() + long(accepted));
  if (Status status = engine_.TruncateSequence(seq_, held_.size()); !status.ok()) {
    Fail(std::move(status));
    return accepted;
  }
  if (drafted_.empty()) {
    Finish("length");
    return accepted;
  }
  for (size_t i = 0; i < drafted_.size() && !finished_; ++i) {
    Emit(drafted_[i], /*last=*/i + 1 == drafted_.size());
  }
  return accepted;
}

// Recomputes rather than moves the surviving tokens' K/V: re-rotating cached keys to their new
// positions would need a backend op of its own and is not exact for quantized caches, while
// feeding them again gives exactly the cache of a sequence that held only them. It costs one
// prefill of about half the context per shift (docs/ARCHITECTURE.md).
bool Sequence::ShiftContext() {
  const size_t length = held_.size();
  const size_t keep = options_.keep;
  if (keep + 2 > context_ || length != engine_.SequenceLength(seq_)) return false;
  const size_t discard = (length - keep) / 2;
  const auto survivors = held_.begin() + long(keep + discard);
  if (std::find(survivors, held_.end(), -1) != held_.end()) return false;  // not named
  if (!engine_.TruncateSequence(seq_, keep).ok()) return false;
  shift_start_ = Clock::now();
  recompute_.assign(survivors, held_.end());
  recompute_.push_back(last_token_);
  held_.resize(keep);
  input_ = recompute_;
  input_fed_ = 0;
  ++result_.context_shifts;
  return true;
}

Status Sequence::Resume(SeqId seq) {
  if (finished_) return Error("sequence %d has finished", seq_);
  const size_t length = engine_.SequenceLength(seq);
  if (length > held_.size()) {
    return Error("sequence %d holds %zu tokens, more than the %zu of sequence %d", seq, length,
                 held_.size(), seq_);
  }
  if (std::find(held_.begin() + long(length), held_.end(), -1) != held_.end()) {
    return Error("sequence %d holds tokens that are not known; they cannot be recomputed", seq_);
  }
  std::vector<int32_t> again(held_.begin() + long(length), held_.end());
  if (prefilling()) {
    again.insert(again.end(), input_.begin() + long(input_fed_), input_.end());
  } else if (generating_) {
    again.push_back(last_token_);  // sampled, not fed yet
  }
  if (again.empty()) return Error("sequence %d has nothing to feed", seq_);
  recompute_ = std::move(again);
  held_.resize(length);
  input_ = recompute_;
  input_fed_ = 0;
  pending_ = 0;
  seq_ = seq;
  if (generating_) shift_start_ = Clock::now();
  return Status::Ok();
}

void Sequence::Cancel() {
  if (!finished_) Finish("cancelled");
}

void Sequence::Abort(Status status) {
  if (!finished_) Fail(std::move(status));
}

void Sequence::Finish(const char* reason) {
  result_.stop_reason = reason;
  if (result_.stop_reason != "stop" && decoder_) {
    std::string tail = stops_.Push(decoder_->Flush());
    tail += stops_.Flush();
    result_.text += tail;
    if (on_token_ && !tail.empty()) on_token_(GeneratedToken{-1, 0.0f, {}}, tail);
  }
  if (generating_) {
    result_.generate_seconds =
        std::chrono::duration<double>(Clock::now() - generate_start_).count();
  }
  finished_ = true;
}

void Sequence::Fail(Status status) {
  status_ = std::move(status);
  result_.stop_reason = "error";
  if (generating_) {
    result_.generate_seconds =
        std::chrono::duration<double>(Clock::now() - generate_start_).count();
  }
  finished_ = true;
}

void RunSequences(Engine& engine, std::span<Sequence* const> sequences) {
  const size_t max_tokens = engine.options().max_batch_tokens;
  std::vector<StepInput> inputs;
  std::vector<Sequence*> fed;
  std::vector<StepOutput> outputs;
  inputs.reserve(sequences.size());
  fed.reserve(sequences.size());
  outputs.reserve(sequences.size());
  for (;;) {
    inputs.clear();
    fed.clear();
    size_t budget = max_tokens;
    // Sampling sequences first, one token each, so that their pace does not depend on the
    // prompts arriving; prompt chunks take what is left of the batch.
    for (const bool prompts : {false, true}) {
      for (Sequence* sequence : sequences) {
        if (budget == 0) break;
        if (sequence->finished() || sequence->prefilling() != prompts) continue;
        const StepInput input = sequence->NextInput(budget);
        budget -= input.tokens.size();
        inputs.push_back(input);
        fed.push_back(sequence);
      }
    }
    if (inputs.empty()) return;
    // A failure of the whole step is also in every output it touched.
    (void)engine.Step(inputs, &outputs);
    for (size_t i = 0; i < fed.size(); ++i) fed[i]->Consume(outputs[i]);
  }
}

}  // namespace petrel
