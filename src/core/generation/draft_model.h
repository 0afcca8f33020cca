// A smaller model as the draft source: it keeps its own engine sequence in step with the
// model's (common prefix kept, the rest fed again), then decodes its proposal one token at a
// time.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "core/generation/draft_source.h"
#include "core/runtime/engine.h"

namespace petrel {

// Fails unless `draft` can draft for `target`: the same vocabulary size and the same text for
// every token (ids are compared across the two models, so they must mean the same). Models
// without a tokenizer (synthetic ones) are compared by size alone.
Status CheckSameVocabulary(const Engine& target, const Engine& draft);

struct DraftModelOptions {
  // Drafting stops when the draft's most likely token has a lower probability than this: an
  // unsure draft is mostly rejected, and each drafted token costs a draft step and a verified
  // position.
  float min_p = 0.0f;
  // <= 0: the draft proposes its argmax (a point mass). Otherwise it samples from its softmax
  // at this temperature, with its own generator seeded by `seed`, and hands the distribution
  // on, so that sampled output keeps the model's distribution.
  float temperature = 0.0f;
  uint64_t seed = 0;
  // Tokens never drafted: the end-of-generation tokens when the model's sampling bans them
  // (ignore_eos), which a draft would otherwise propose only to have them rejected.
  std::vector<int32_t> banned;
};

class DraftModel final : public DraftSource {
 public:
  // Takes `draft` after CheckSameVocabulary(target, *draft).
  static Result<std::unique_ptr<DraftModel>> Create(const Engine& target,
                                                    std::unique_ptr<Engine> draft,
                                                    const DraftModelOptions& options);
  ~DraftModel() override;
  Status Propose(std::span<const int32_t> context, size_t max_tokens, Draft* draft) override;
  Result<size_t> CatchUp(std::span<const int32_t> context) override;
  void Reset() override;
  Engine& engine() { return *engine_; }

 private:
  DraftModel(std::unique_ptr<Engine> engine, const DraftModelOptions& options);
  // Feeds `tokens` after what the draft sequence holds; logits_ gets the last one's logits.
  Status Feed(std::span<const int32_t> tokens);
  // Keeps the longest prefix of what the draft sequence holds that `context` shares, but feeds
  // at least its last token (whose logits start a draft), and feeds the rest; nothing when it
  // holds `context` already (logits_ are then its last token's). Sets *fed to the tokens fed.
  // False when the context holds unknown tokens (nothing changed then).
  Result<bool> SyncTo(std::span<const int32_t> context, size_t* fed);

  std::unique_ptr<Engine> engine_;
  DraftModelOptions options_;
  SeqId seq_ = -1;
  std::vector<int32_t> held_;  // the tokens the draft sequence holds
  std::vector<int32_t> feed_;  // scratch for Feed
  std::vector<float> logits_;
  std::vector<float> probs_;  // scratch: one softmax
  std::mt19937_64 rng_;
};

}  // namespace petrel
