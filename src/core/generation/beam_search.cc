// BeamSearch: expand every live beam by its n best next tokens, keep the n best candidates by
// summed log-probability, retire those that end, and return the best by normalised score. The
// beams are engine sequences forked from their parents and stepped together.
#include "core/generation/beam_search.h"

#include <algorithm>
#include <cmath>

#include "core/tokenizer/tokenizer.h"

namespace petrel {
namespace {

struct Beam {
  SeqId seq;
  std::vector<int32_t> tokens;
  double logprob = 0.0;
};

struct Expansion {
  size_t parent;
  int32_t token;
  double logprob;
};

double Normalised(double logprob, size_t length, float penalty) {
  return logprob / std::pow(double(std::max<size_t>(length, 1)), double(penalty));
}

// Log-softmax of one row, then its `n` best tokens (ties: lower id first).
void BestTokens(const float* logits, size_t n_vocab, size_t n, std::vector<std::pair<int32_t, double>>* out) {
  double max_logit = -INFINITY;
  for (size_t i = 0; i < n_vocab; ++i) max_logit = std::max(max_logit, double(logits[i]));
  double sum = 0.0;
  for (size_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - max_logit);
  const double log_z = max_logit + std::log(sum);
  std::vector<int32_t> ids(n_vocab);
  for (size_t i = 0; i < n_vocab; ++i) ids[i] = int32_t(i);
  n = std::min(n, n_vocab);
  std::partial_sort(ids.begin(), ids.begin() + long(n), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  out->clear();
  for (size_t i = 0; i < n; ++i) out->push_back({ids[i], double(logits[ids[i]]) - log_z});
}

// Runs `inputs` in one Step; any input's failure is the error.
Status StepAll(Engine& engine, std::span<const StepInput> inputs, std::vector<StepOutput>* outputs) {
  PETREL_RETURN_IF_ERROR(engine.Step(inputs, outputs));
  for (const StepOutput& output : *outputs) PETREL_RETURN_IF_ERROR(output.status);
  return Status::Ok();
}

}  // namespace

Result<BeamSearchResult> BeamSearch(Engine& engine, SeqId seq, const std::vector<int32_t>& prompt,
                                    const BeamSearchOptions& options) {
  if (options.n_beams == 0 || options.n_beams > 64) return Error("beam count %zu is invalid (1..64)", options.n_beams);
  if (prompt.empty()) return Error("the prompt has no tokens");
  // Checked before the prompt is fed in batches, so that the count is the whole prompt's.
  const size_t held = engine.SequenceLength(seq) + prompt.size();
  if (held > engine.context()) {
    return Error("sequence %d: %zu tokens exceed the context of %zu", seq, held, engine.context());
  }
  const size_t n_vocab = size_t(engine.config().n_vocab);
  const Tokenizer* tokenizer = engine.tokenizer();
  std::vector<StepInput> inputs;
  std::vector<StepOutput> outputs;
  PETREL_ASSIGN_OR_RETURN(SeqId root, engine.ForkSequence(seq));
  const size_t chunk = engine.options().max_batch_tokens;
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    const size_t end = std::min(prompt.size(), begin + chunk);
    const StepInput input{root, std::span<const int32_t>(prompt).subspan(begin, end - begin),
                          end == prompt.size()};
    Status status = StepAll(engine, {&input, 1}, &outputs);
    if (!status.ok()) {
      engine.FreeSequence(root);
      return status;
    }
  }
  std::vector<Beam> beams = {{root, {}, 0.0}};
  std::vector<std::vector<float>> beam_logits = {
      std::vector<float>(outputs[0].logits.begin(), outputs[0].logits.end())};
  struct Finished {
    std::vector<int32_t> tokens;
    double logprob, score;
  };
  std::vector<Finished> finished;
  std::vector<std::pair<int32_t, double>> best;
  auto free_all = [&]() {
    for (const Beam& beam : beams) engine.FreeSequence(beam.seq);
  };
  for (size_t step = 0; step < options.max_new_tokens && !beams.empty(); ++step) {
    std::vector<Expansion> expansions;
    for (size_t b = 0; b < beams.size(); ++b) {
      BestTokens(beam_logits[b].data(), n_vocab, options.n_beams, &best);
      for (const auto& [token, logprob] : best) expansions.push_back({b, token, beams[b].logprob + logprob});
    }
    std::stable_sort(expansions.begin(), expansions.end(),
                     [](const Expansion& a, const Expansion& b) { return a.logprob > b.logprob; });
    // Keep the n best; ending candidates retire (and still take one of the n places, as in
    // Hugging Face's beam search), the others become the next beams.
    std::vector<Beam> next;
    inputs.clear();
    const bool last_step = step + 1 == options.max_new_tokens;
    size_t retired_at_limit = 0;
    for (const Expansion& e : expansions) {
      if (next.size() == options.n_beams || retired_at_limit == options.n_beams) break;
      std::vector<int32_t> tokens = beams[e.parent].tokens;
      tokens.push_back(e.token);
      const bool ends = options.stop_at_end_of_generation && tokenizer && tokenizer->IsEndOfGeneration(e.token);
      if (ends || last_step) {
        finished.push_back({tokens, e.logprob, Normalised(e.logprob, tokens.size(), options.length_penalty)});
        retired_at_limit += last_step ? 1 : 0;
        continue;
      }
      auto child = engine.ForkSequence(beams[e.parent].seq);
      if (!child.ok()) {
        free_all();
        for (const Beam& beam : next) engine.FreeSequence(beam.seq);
        return child.status();
      }
      next.push_back({*child, std::move(tokens), e.logprob});
    }
    free_all();
    beams = std::move(next);
    if (beams.empty()) break;
    // Stop early when no live beam can beat the n-th best finished hypothesis even if it ended now.
    if (finished.size() >= options.n_beams) {
      std::vector<double> scores;
      for (const Finished& f : finished) scores.push_back(f.score);
      std::sort(scores.rbegin(), scores.rend());
      double best_live = -INFINITY;
      for (const Beam& beam : beams) best_live = std::max(best_live, Normalised(beam.logprob, beam.tokens.size(), options.length_penalty));
      if (best_live <= scores[options.n_beams - 1]) break;
    }
    // Each beam feeds its last token (the storage of `beams` stays put until the next step).
    for (const Beam& beam : beams) {
      inputs.push_back({beam.seq, std::span<const int32_t>(&beam.tokens.back(), 1), true});
    }
    Status status = StepAll(engine, inputs, &outputs);
    if (!status.ok()) {
      free_all();
      return status;
    }
    beam_logits.resize(beams.size());
    for (size_t b = 0; b < beams.size(); ++b) {
      beam_logits[b].assign(outputs[b].logits.begin(), outputs[b].logits.end());
    }
  }
  for (const Beam& beam : beams) {
    finished.push_back({beam.tokens, beam.logprob, Normalised(beam.logprob, beam.tokens.size(), options.length_penalty)});
  }
  free_all();
  if (finished.empty()) return Error("beam search produced no hypothesis");
  const Finished* winner = &finished[0];
  for (const Finished& f : finished) {
    if (f.score > winner->score) winner = &f;
  }
  return BeamSearchResult{winner->tokens, float(winner->score), float(winner->logprob)};
}

}  // namespace petrel
