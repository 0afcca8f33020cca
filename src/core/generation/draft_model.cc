// DraftModel: the vocabulary check, keeping the draft sequence in step, drafting.
#include "core/generation/draft_model.h"

#include <algorithm>
#include <cmath>

#include "core/generation/sampling/sampler.h"  // ArgMax
#include "core/tokenizer/tokenizer.h"

namespace petrel {

Status CheckSameVocabulary(const Engine& target, const Engine& draft) {
  const int64_t n_target = target.config().n_vocab;
  const int64_t n_draft = draft.config().n_vocab;
  if (n_target != n_draft) {
    return Error(
        "the draft model's vocabulary has %lld tokens, the model's %lld: a draft must "
        "share the model's vocabulary",
        (long long)n_draft, (long long)n_target);
  }
  const Tokenizer* t = target.tokenizer();
  const Tokenizer* d = draft.tokenizer();
  if (!t && !d) return Status::Ok();  // token ids are all either model knows
  if (!t || !d) {
    return Error("the %s has no tokenizer, so its vocabulary cannot be compared",
                 !d ? "draft model" : "model");
  }
  const size_t n = std::min({size_t(n_target), t->n_vocab(), d->n_vocab()});
  if (t->n_vocab() != d->n_vocab()) {
    return Error("the draft model's tokenizer has %zu tokens, the model's %zu", d->n_vocab(),
                 t->n_vocab());
  }
  for (size_t id = 0; id < n; ++id) {
    if (t->TokenText(int32_t(id)) != d->TokenText(int32_t(id))) {
      return Error(
          "token %zu is \"%s\" in the draft model but \"%s\" in the model: a draft must "
          "share the model's vocabulary",
          id, std::string(d->TokenText(int32_t(id))).c_str(),
          std::string(t->TokenText(int32_t(id))).c_str());
    }
  }
  return Status::Ok();
}

DraftModel::DraftModel(std::unique_ptr<Engine> engine, const DraftModelOptions& options)
    : engine_(std::move(engine)), options_(options), rng_(options.seed) {}

DraftModel::~DraftModel() {
  if (engine_ && seq_ >= 0) engine_->FreeSequence(seq_);
}

Result<std::unique_ptr<DraftModel>> DraftModel::Create(const Engine& target,
                                                       std::unique_ptr<Engine> draft,
                                                       const DraftModelOptions& options) {
  PETREL_RETURN_IF_ERROR(CheckSameVocabulary(target, *draft));
  std::unique_ptr<DraftModel> model(new DraftModel(std::move(draft), options));
  model->seq_ = model->engine_->NewSequence();
  return model;
}

void DraftModel::Reset() {
  (void)engine_->TruncateSequence(seq_, 0);
  held_.clear();
  rng_.seed(options_.seed);
}

Status DraftModel::Feed(std::span<const int32_t> tokens) {
  feed_.assign(tokens.begin(), tokens.end());
  const Status status = engine_->Prefill(seq_, feed_, /*all_logits=*/false, &logits_);
  if (!status.ok()) {
    // Prefill stops at a failed chunk; start from a known state next time.
    (void)engine_->TruncateSequence(seq_, 0);
    held_.clear();
    return Error("draft model: %s", status.message().c_str());
  }
  held_.insert(held_.end(), tokens.begin(), tokens.end());
  return Status::Ok();
}

Result<bool> DraftModel::SyncTo(std::span<const int32_t> context, size_t* fed) {
  *fed = 0;
  if (held_.size() == context.size() && std::equal(held_.begin(), held_.end(), context.begin())) {
    return true;  // caught up already: every Feed leaves logits_ at the last token held
  }
  // Keep the longest common prefix, but feed at least the last token: its logits start the
  // draft.
  size_t keep = 0;
  while (keep < held_.size() && keep + 1 < context.size() && held_[keep] == context[keep]) ++keep;
  const std::span<const int32_t> rest = context.subspan(keep);
  if (std::any_of(rest.begin(), rest.end(), [](int32_t id) { return id < 0; })) return false;
  PETREL_RETURN_IF_ERROR(engine_->TruncateSequence(seq_, keep));
  held_.resize(keep);
  PETREL_RETURN_IF_ERROR(Feed(rest));
  *fed = rest.size();
  return true;
}

Result<size_t> DraftModel::CatchUp(std::span<const int32_t> context) {
  if (context.empty() || context.size() >= engine_->context()) return size_t{0};
  size_t fed = 0;
  PETREL_RETURN_IF_ERROR(SyncTo(context, &fed).status());
  return fed;
}

Status DraftModel::Propose(std::span<const int32_t> context, size_t max_tokens, Draft* draft) {
  draft->Clear();
  if (context.empty() || max_tokens == 0) return Status::Ok();
  // Room in the draft's own context for the context and all but the last drafted token.
  const size_t room = engine_->context();
  if (context.size() >= room) return Status::Ok();
  max_tokens = std::min(max_tokens, room - context.size() + 1);
  size_t fed = 0;
  PETREL_ASSIGN_OR_RETURN(const bool synced, SyncTo(context, &fed));
  if (!synced) return Status::Ok();  // tokens not known cannot be fed
  draft->synced = fed;
  const size_t n_vocab = size_t(engine_->config().n_vocab);
  const bool sample = options_.temperature > 0.0f;
  for (size_t i = 0; i < max_tokens; ++i) {
    for (int32_t id : options_.banned) {
      if (size_t(id) < n_vocab) logits_[size_t(id)] = -INFINITY;
    }
    const float* logits = logits_.data();
    const float max_logit = *std::max_element(logits, logits + n_vocab);
    if (options_.min_p > 0.0f) {
      double sum = 0.0;
      for (size_t t = 0; t < n_vocab; ++t) sum += std::exp(double(logits[t]) - max_logit);
      if (1.0 / sum < double(options_.min_p)) break;  // the top token's probability
    }
    int32_t token = -1;
    if (!sample) {
      token = ArgMax(logits, n_vocab);
    } else {
      probs_.resize(n_vocab);
      double sum = 0.0;
      const double inv_t = 1.0 / double(options_.temperature);
      for (size_t t = 0; t < n_vocab; ++t) {
        probs_[t] = float(std::exp((double(logits[t]) - max_logit) * inv_t));
        sum += probs_[t];
      }
      for (float& p : probs_) p = float(p / sum);
      // The same 53-bit uniform draw as the sampler chain's, so that runs reproduce.
      const double u = double(rng_() >> 11) * (1.0 / 9007199254740992.0);
      double acc = 0.0;
      token = int32_t(n_vocab - 1);
      for (size_t t = 0; t < n_vocab; ++t) {
        acc += probs_[t];
        if (u < acc) {
          token = int32_t(t);
          break;
        }
      }
      // A token drawn with probability 0 (only where rounding leaves the sum short of 1)
      // cannot be verified against q; stop there.
      if (probs_[size_t(token)] <= 0.0f) break;
      draft->probs.insert(draft->probs.end(), probs_.begin(), probs_.end());
    }
    draft->tokens.push_back(token);
    if (i + 1 < max_tokens) {
      const int32_t next[] = {token};
      PETREL_RETURN_IF_ERROR(Feed(next));
      ++draft->steps;
    }
  }
  return Status::Ok();
}

}  // namespace petrel
